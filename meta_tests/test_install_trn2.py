"""``bash scripts/install-trn2.sh`` in a Neuron environment that has its own versions.

A Neuron venv or container comes with its own Python (3.12: the TorchNeuron beta's conda
environment and Neuron's DLAMIs and containers, docs/tiers-and-stacks.md) and its own pytest,
packaging, filelock, psutil, tokenizers and safetensors, older than the cpu stacks' pins. The
install must take the suite there without moving any of them (the suite's requirements are
ranges; the exact pins are the cpu constraints'), say what it changed, and the suite's
plugins must load under that pytest. The Neuron stack itself (torch, torch-neuronx,
torchtitan, transformers) is stood for by placeholder distributions: metadata only, nothing
importable, so the plugins' import must not need torch either. torch declares setuptools on
Python >= 3.12 (its wheels' ``Requires-Dist: setuptools; python_version >= "3.12"``), so the
environment has it; the venv's ``pip check`` is broken before the install (a placeholder
requiring a distribution that is not there), as Neuron environments often are.

The first install needs the package index (pip installs the environment's versions and the
suite's missing dependencies), as CI has; the second runs with the index unreachable and
every dependency already there (a host without network): it must fetch nothing, not even
setuptools for pip's build isolation. Python 3.10 is refused with a sentence.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
# The environment of issue #31's check: a Neuron venv's own versions of the suite's
# pure-Python dependencies, each lower than the cpu stacks' pin; setuptools, which torch
# brings on 3.12, at a version a Neuron environment of 2024-2025 may hold.
NEURON_ENV_VERSIONS = {"pytest": "8.3.5", "packaging": "24.2", "filelock": "3.16.1", "psutil": "6.1.1",
                       "tokenizers": "0.22.1", "safetensors": "0.5.3", "setuptools": "69.5.1"}
# Placeholders under the Neuron stack's distribution names (versions of the shape a Neuron
# release has; no module is installed), with the requirements their metadata declares here.
PLACEHOLDER_STACK = {"torch": ("2.9.0", ['setuptools; python_version >= "3.12"']),
                     "torch-neuronx": ("2.9.0.2.11.19", ["torch==2.9.0"]),
                     "torchtitan": ("0.2.2+neuron.1", []),
                     "transformers": ("4.57.1", []),
                     # broken before the install: pip check reports it, the install must not
                     "neuronx-distributed": ("0.15.22404", ["torch-xla==2.9.0"])}
BROKEN_BEFORE = "neuronx-distributed 0.15.22404 requires torch-xla, which is not installed."
# The TorchNeuron beta's Python, and the one the install must refuse: (variable naming it, version).
PYTHON_312 = ("CONFORMANCE_PYTHON312", "3.12")
PYTHON_310 = ("CONFORMANCE_PYTHON310", "3.10")


def find_python(variable: str, version: str) -> Path:
    """The interpreter ``variable`` names, else the newest pyenv build of ``version``
    (``$PYENV_ROOT``, default ``~/.pyenv``), else ``pythonX.Y`` on PATH; a clear failure (not
    a skip) where there is none."""
    if os.environ.get(variable):
        return Path(os.environ[variable])
    root = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser()
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"))
    if found:
        return found[-1]
    on_path = shutil.which(f"python{version}")
    if on_path is None:
        pytest.fail(f"no Python {version} on this machine (looked in {root}/versions and on PATH): set {variable}")
    return Path(on_path)


def write_placeholder(site: Path, name: str, version: str, requires: list[str]) -> None:
    """An installed distribution with metadata only (PEP 376/566 dist-info), as pip lists it."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(metadata)
    (info / "INSTALLER").write_text("placeholder\n")
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n")


def versions(python: Path) -> dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                         capture_output=True, text=True, check=True).stdout
    return {d["name"].lower(): d["version"] for d in json.loads(out)}


def pip(python: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run([str(python), "-m", "pip", *args], check=True, env=env)


def purelib(python: Path) -> Path:
    """The environment's site-packages folder."""
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "VIRTUAL_ENV")}


def offline_env() -> dict[str, str]:
    """pip with no index and no wheel folder: nothing can be fetched (no pip config file is
    read, so no configured index or find-links either)."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def install(venv: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/install-trn2.sh"], cwd=REPO, capture_output=True, text=True,
                          env={**env, "VIRTUAL_ENV": str(venv)}, timeout=900)


@pytest.fixture(scope="module")
def neuron_like_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("neuron-venv") / "venv"
    python312 = find_python(*PYTHON_312)
    subprocess.run([str(python312), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip(python, "install", "--quiet", "--disable-pip-version-check",
        *(f"{n}=={v}" for n, v in NEURON_ENV_VERSIONS.items()), env=clean_env())
    site = purelib(python)
    for name, (version, requires) in PLACEHOLDER_STACK.items():
        write_placeholder(site, name, version, requires)
    return venv


def test_install_keeps_a_neuron_environments_own_versions(neuron_like_venv):
    """install-trn2.sh exits 0 there (Python 3.12), moves none of the environment's versions,
    says what it added, names the pip check problem that was there before it as not its own,
    and pytest (8.3.5 there) loads the suite's plugins."""
    python = neuron_like_venv / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                          text=True).stdout.strip() == "(3, 12)"
    before = versions(python)
    proc = install(neuron_like_venv, clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = versions(python)
    moved = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    assert moved == {}, f"the install moved versions the environment had: {moved}"
    assert "qwen3-trn-conformance" in after
    assert "what the install changed:" in proc.stdout and "+ hypothesis " in proc.stdout, proc.stdout
    assert f"pip check: there before the install, not the suite's: {BROKEN_BEFORE}" in proc.stdout, proc.stdout
    # recorded inside the environment, where the pip check contract takes it as the environment's own
    from reports import inventory

    assert inventory.pip_check_before_install(str(neuron_like_venv)) == {BROKEN_BEFORE}
    loaded = subprocess.run([str(python), "-m", "pytest", "--help"], cwd=REPO, capture_output=True, text=True,
                            env=clean_env(), timeout=300)
    assert loaded.returncode == 0, loaded.stdout[-2000:] + loaded.stderr[-3000:]
    assert "--neuron-dress-rehearsal" in loaded.stdout and "--trn2-model-dir" in loaded.stdout


def test_install_without_network_fetches_nothing(neuron_like_venv):
    """On a host without network (no index, no wheel folder) whose environment already has
    every dependency of the suite (the first install put the missing ones there; the suite
    itself is taken out again), the install fetches nothing: the suite's editable build uses
    the environment's own setuptools (no build isolation, which would fetch setuptools).
    setuptools 69.5.1 builds an editable wheel only with ``wheel`` installed (setuptools
    changelog v70.1.0): without it the install says what to install, with it it succeeds."""
    python = neuron_like_venv / "bin" / "python"
    have = versions(python)
    assert {"hypothesis", "pytest-xdist", "matplotlib"} <= set(have), "runs after the first install test"
    assert "wheel" not in have
    pip(python, "uninstall", "--yes", "--quiet", "qwen3-trn-conformance", env=offline_env())
    have = versions(python)
    refused = install(neuron_like_venv, offline_env())
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stdout + refused.stderr
    assert "lacks wheel (not installed; setuptools.build_meta asks for it)" in refused.stderr, refused.stderr
    assert versions(python) == have
    pip(python, "install", "--quiet", "wheel==0.43.0", env=clean_env())
    have = versions(python)
    proc = install(neuron_like_venv, offline_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert versions(python) == {**have, "qwen3-trn-conformance": "0.1.0"}, "the offline install changed more"


def test_missing_dependencies_without_network_are_named(neuron_like_venv, tmp_path):
    """Offline with a dependency missing, the install stops before writing anything and says
    which dependency it could not get and that no index answered (pip's reason, no traceback)."""
    python = neuron_like_venv / "bin" / "python"
    pip(python, "uninstall", "--yes", "--quiet", "hypothesis", env=offline_env())
    have = versions(python)
    proc = install(neuron_like_venv, offline_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "hypothesis" in proc.stderr and "no package index answered" in proc.stderr, proc.stderr
    assert versions(python) == have


def test_a_requirement_the_install_would_break_stops_it_before_anything_is_written(neuron_like_venv):
    """An installed distribution that requires ``hypothesis<6`` while hypothesis is missing
    (pip check: "requires hypothesis, which is not installed", there before): installing the
    suite's hypothesis (>= 6.100) would break it. pip's resolver does not weigh installed
    distributions' requirements, so the install reads the dry run's report against them and
    stops, naming both, before anything is written; the problem that was there before is still
    not counted as the suite's."""
    python = neuron_like_venv / "bin" / "python"
    pip(python, "uninstall", "--yes", "--quiet", "hypothesis", env=clean_env())
    site = purelib(python)
    write_placeholder(site, "neuron-helper", "1.0", ["hypothesis<6"])
    try:
        have = versions(python)
        proc = install(neuron_like_venv, clean_env())
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        assert "neuron-helper 1.0 requires hypothesis<6; the install would add hypothesis 6." in proc.stderr, \
            proc.stderr
        assert versions(python) == have, "the install wrote before refusing"
        assert "not the suite's: neuron-helper 1.0 requires hypothesis, which is not installed." in proc.stdout
    finally:
        shutil.rmtree(site / "neuron_helper-1.0.dist-info")


@pytest.mark.parametrize("script", ["install-trn2.sh", "trn2.sh"])
def test_python_310_is_refused_with_a_sentence(script):
    """The suite needs Python >= 3.11 (pyproject ``requires-python``): an older interpreter gets
    one line saying so, naming the script, before anything runs under it."""
    python310 = find_python(*PYTHON_310)
    proc = subprocess.run(["bash", f"scripts/{script}"], cwd=REPO, capture_output=True, text=True,
                          env={**clean_env(), "PYTHON": str(python310)}, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(script.removesuffix(".sh") + ":"), proc.stderr
    assert "is Python 3.10" in proc.stderr and "needs Python >= 3.11" in proc.stderr, proc.stderr


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


def test_the_scripts_python_floor_is_pyprojects():
    """install-trn2.sh and trn2.sh refuse below the ``requires-python`` floor of pyproject.toml, no
    other (both take their python from scripts/active-python.sh)."""
    import re
    import tomllib

    floor = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    script = (REPO / "scripts" / "active-python.sh").read_text()
    for user in ("install-trn2.sh", "trn2.sh"):
        assert "source scripts/active-python.sh" in (REPO / "scripts" / user).read_text(), user
    major, minor = re.search(r"sys\.version_info < \((\d+), (\d+)\)", script).groups()
    assert floor == f">={major}.{minor}" and f"needs Python >= {major}.{minor}" in script, (floor, major, minor)
