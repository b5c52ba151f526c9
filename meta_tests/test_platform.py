"""Platform detection and the trn2 launch line, driven by stand-in hardware probes.

The stand-ins replace only what the hardware would show (device nodes, ``neuron-ls``
output); torch, torchtitan and torch-neuronx are the real ones installed (or not) here.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import platform as platforms
from fixtures import runs, topology

pytestmark = pytest.mark.meta

REPO = Path(__file__).resolve().parent.parent

NEURON_LS_48XL = """instance-type: trn2.48xlarge
instance-id: i-0123456789abcdef0
logical-neuroncore-config: {lnc}
+--------+--------+----------+--------+---------------+--------------+
| NEURON | NEURON |  NEURON  | NEURON |   CONNECTED   |     PCI      |
| DEVICE | CORES  | CORE IDS | MEMORY |    DEVICES    |     BDF      |
+--------+--------+----------+--------+---------------+--------------+
| 0      | 4      | 0-3      | 96 GB  | 12, 3, 4, 1   | 0000:cc:00.0 |
+--------+--------+----------+--------+---------------+--------------+
"""


def _standin_host(tmp_path: Path, devices: int = 16, lnc: int = 2) -> tuple[Path, Path]:
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(devices):
        (dev / f"neuron{i}").touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "neuron-ls"
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n" + NEURON_LS_48XL.format(lnc=lnc) + "EOF\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return dev, bin_dir


def test_detection_reads_standin_trn2_host(tmp_path):
    dev, bin_dir = _standin_host(tmp_path)
    found = platforms.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={})
    assert len(found.device_nodes) == 16
    assert found.instance == "trn2.48xlarge"
    assert found.lnc == 2
    # torch-neuronx is really probed, and it is not installed on this machine.
    assert found.torch_neuron != "available"
    assert any("torch.neuron" in m for m in found.missing), found.missing
    with pytest.raises(platforms.NeuronUnavailable, match="torch.neuron is not available"):
        platforms.require_trn2(found)


def test_lnc_env_overrides_neuron_ls(tmp_path):
    dev, bin_dir = _standin_host(tmp_path, lnc=2)
    found = platforms.detect_neuron(dev_dir=str(dev), path=str(bin_dir),
                                    env={topology.LNC_ENV: "1"})
    assert found.lnc == 1
    assert platforms.trn2_platform(found.instance, found.lnc).nproc_per_node == 128


def test_no_device_names_every_missing_piece(tmp_path):
    found = platforms.detect_neuron(dev_dir=str(tmp_path), path=str(tmp_path), env={})
    message = "; ".join(found.missing)
    assert "no /dev/neuron* device nodes" in message
    assert "neuron-ls not on PATH" in message
    assert "torch.neuron is not available" in message


def test_trn2_launch_line_has_64_ranks_and_lnc_env(tmp_path):
    platform = platforms.trn2_platform("trn2.48xlarge", 2)
    cache = runs.RunCache(tmp_path / "runs", platform,
                          ["--hf_assets_path", "/models/Qwen3-4B-Instruct-2507"], asset_key="k")
    spec = runs.RunSpec(config="dense_native", steps=10)
    argv = cache.argv(spec, tmp_path / "run")
    assert "--nproc_per_node=64" in argv
    assert argv[argv.index("--module") + 1] == platforms.TRN2_MODULE
    assert argv[argv.index("--config") + 1] == "dense_native"
    env = cache.env(spec, tmp_path / "run")
    assert env[topology.LNC_ENV] == "2"
    assert env["PYTHONPATH"] == str(REPO)


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (runs.SESSION_ENV, "CONFORMANCE_REPORT_DIR")}
    return subprocess.run([sys.executable, "-m", "pytest", *args, "--report-dir", str(tmp_path / "report")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("markexpr", ["trn2", "trn2 and topology", "not cpu and not meta"])
def test_trn2_tier_without_device_is_a_usage_error(tmp_path, markexpr):
    """`pytest -m trn2` here stops with a clear error, never a run of skips."""
    if Path("/dev/neuron0").exists():
        pytest.skip("this machine is a Neuron host")
    proc = _pytest(tmp_path, "-m", markexpr, "-q", "conformance/test_topology.py")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "not a Neuron host" in proc.stderr + proc.stdout
    assert "/dev/neuron" in proc.stderr + proc.stdout
    assert " passed" not in proc.stdout and " skipped" not in proc.stdout


def test_empty_selection_is_not_green(tmp_path):
    proc = _pytest(tmp_path, "-m", "cpu and meta", "-q", "conformance/test_topology.py")
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "no test was collected" in proc.stdout
