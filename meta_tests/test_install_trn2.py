"""``bash scripts/install-trn2.sh`` in a Neuron environment that has its own versions.

A Neuron venv or container comes with its own pytest, packaging, filelock, psutil, tokenizers
and safetensors, older than the cpu stacks' pins. The install must take the suite there
without moving any of them (the suite's requirements are ranges; the exact pins are the cpu
constraints'), say what it changed, and the suite's plugins must load under that pytest.
The Neuron stack itself (torch, torch-neuronx, torchtitan, transformers) is stood for by
placeholder distributions: metadata only, nothing importable, so the plugins' import must
not need torch either.

Needs the package index (pip installs the environment's versions and the suite's missing
dependencies), as CI has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
# The environment of issue #31's check: a Neuron venv's own versions of the suite's
# pure-Python dependencies, each lower than the cpu stacks' pin.
NEURON_ENV_VERSIONS = {"pytest": "8.3.5", "packaging": "24.2", "filelock": "3.16.1", "psutil": "6.1.1",
                       "tokenizers": "0.22.1", "safetensors": "0.5.3"}
# Placeholders under the Neuron stack's distribution names (versions of the shape a Neuron
# release has; no module is installed).
PLACEHOLDER_STACK = {"torch": "2.9.0", "torch-neuronx": "2.9.0.2.11.19", "torchtitan": "0.2.2+neuron.1",
                     "transformers": "4.57.1"}


def write_placeholder(site: Path, name: str, version: str) -> None:
    """An installed distribution with metadata only (PEP 376/566 dist-info), as pip lists it."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("placeholder\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")


def versions(python: Path) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    return {d["name"].lower(): d["version"] for d in json.loads(out)}


@pytest.fixture(scope="module")
def neuron_like_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("neuron-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *(f"{n}=={v}" for n, v in NEURON_ENV_VERSIONS.items())], check=True)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for name, version in PLACEHOLDER_STACK.items():
        write_placeholder(site, name, version)
    return venv


def test_install_keeps_a_neuron_environments_own_versions(neuron_like_venv):
    """install-trn2.sh exits 0 there, moves none of the environment's versions, says what it
    added, and pytest (8.3.5 there) loads the suite's plugins."""
    python = neuron_like_venv / "bin" / "python"
    before = versions(python)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    proc = subprocess.run(["bash", "scripts/install-trn2.sh"], cwd=REPO, capture_output=True, text=True,
                          env={**env, "VIRTUAL_ENV": str(neuron_like_venv)}, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = versions(python)
    moved = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert moved == {}, f"the install moved versions the environment had: {moved}"
    assert "qwen3-trn-conformance" in after
    assert "what the install changed:" in proc.stdout and "+ hypothesis " in proc.stdout, proc.stdout
    loaded = subprocess.run([str(python), "-m", "pytest", "--help"], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=300)
    assert loaded.returncode == 0, loaded.stdout[-2000:] + loaded.stderr[-3000:]
    assert "--neuron-dress-rehearsal" in loaded.stdout and "--trn2-model-dir" in loaded.stdout


def test_a_version_outside_the_suites_range_stops_before_anything_is_written(tmp_path):
    """An installed dependency below the suite's range is named with the range, and nothing is
    installed (not even the suite): the install never moves a version the environment has."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import install_trn2
    finally:
        sys.path.pop(0)
    reqs = install_trn2.suite_requirements()
    missing, outside = install_trn2.unmet(reqs, {"pytest": "7.4.4", "packaging": "24.2"})
    assert any(o.startswith("pytest 7.4.4 is installed; the suite needs pytest>=") for o in outside), outside
    assert "packaging" not in {r.name for r in missing} and "psutil" in {r.name for r in missing}
    conflict = ("ERROR: Cannot install x\n\nThe conflict is caused by:\n    The user requested torch==2.15.0\n"
                "    The user requested (constraint) torch<=2.14.1\n\nTo fix this you could try to:\n")
    assert "(constraint) torch<=2.14.1" in install_trn2.pip_reason(conflict)
