"""TierProfile detection and the trn2 launch line, driven by stand-in hardware probes.

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

from fixtures.launch import neighbours
from fixtures.tiers import neuron_host, tier_profile
from fixtures.tiers import topology
from fixtures.repo import SESSION_ENV, WRITEUP_MODULES_DIR
from fixtures.runs.plan import RANK_WRAPPER, launch_plan
from fixtures.runs.spec import RunSpec, TrainingPath
from fixtures.runs.result import compile_cache_events
from meta_tests import qwen3_4b

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402

def neuron_ls_output(instance: str = "trn2.48xlarge", devices: int = 16, lnc: int = 2) -> str:
    """neuron-ls's plain table (aws-neuron-sdk neuron-ls.rst, trn2n.48xlarge example layout):
    one row per device with its logical core count and ids."""
    per = 8 // lnc
    rows = "".join(f"| {d:<6} | {per:<6} | {f'{d * per}-{d * per + per - 1}':<8} | 96 GB  | 0000:cc:00.0 |\n"
                   for d in range(devices))
    return (f"instance-type: {instance}\ninstance-id: i-0123456789abcdef0\n"
            f"logical-neuroncore-config: {lnc}\n"
            "+--------+--------+----------+--------+--------------+\n"
            "| NEURON | NEURON |  NEURON  | NEURON |     PCI      |\n"
            "| DEVICE | CORES  | CORE IDS | MEMORY |     BDF      |\n"
            "+--------+--------+----------+--------+--------------+\n" + rows +
            "+--------+--------+----------+--------+--------------+\n")


def _standin_host(tmp_path: Path, devices: int = 16, lnc: int = 2,
                  instance: str = "trn2.48xlarge", listed: int | None = None) -> tuple[Path, Path]:
    """``devices`` /dev/neuron* nodes and a neuron-ls listing ``listed`` devices (default: as many)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(devices):
        (dev / f"neuron{i}").touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "neuron-ls"
    tool.write_text("#!/bin/sh\ncat <<'EOF'\n"
                    + neuron_ls_output(instance, devices if listed is None else listed, lnc) + "EOF\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return dev, bin_dir


def _trn2(found, tmp_path: Path):
    """The trn2 profile ``found`` gives with a Qwen3-4B model folder (the usage check's input)."""
    return tier_profile.require_trn2(found, qwen3_4b.model_folder(tmp_path))


def _refused(found, tmp_path: Path, match: str) -> None:
    """``found`` with a model folder is refused as not a trn2 host, the reason matching ``match``."""
    with pytest.raises(neuron_host.NeuronUnavailable, match=match):
        _trn2(found, tmp_path)


def test_detection_reads_standin_trn2_host(tmp_path):
    dev, bin_dir = _standin_host(tmp_path)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={})
    assert len(found.device_nodes) == 16
    assert found.instance == "trn2.48xlarge"
    assert found.lnc == 2
    # torch-neuronx is really probed, and it is not installed on this machine.
    assert found.torch_neuron != "available"
    assert any("torch.neuron" in m for m in found.missing), found.missing
    _refused(found, tmp_path, "torch.neuron is not available")


def test_lnc_env_disagreeing_with_neuron_ls_is_refused(tmp_path):
    """NEURON_LOGICAL_NC_CONFIG=1 on a host whose neuron-ls says 2 is a usage error naming both,
    never 128 ranks at LNC=1 (the cores a rank is given are numbered at the host's LNC)."""
    dev, bin_dir = _standin_host(tmp_path, lnc=2)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={topology.LNC_ENV: "1"},
                                      torch_neuron_probe=lambda: "available")
    _refused(found, tmp_path, "the LNC controls disagree: neuron-ls's logical-neuroncore-config .* says 2; "
                         "NEURON_LOGICAL_NC_CONFIG in the environment says 1")
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={topology.LNC_ENV: "2"},
                                      torch_neuron_probe=lambda: "available")
    assert _trn2(found, tmp_path).nproc_per_node == 64


# Rows of the three layouts neuron-ls.rst has documented (aws-neuron-sdk, trn2n.48xlarge).
LAYOUT_2_21_BETA = """+--------+--------+---------+--------+---------------+---------+
| NEURON | NEURON | LOGICAL | NEURON |   CONNECTED   |   PCI   |
| DEVICE | CORES  |   NC    | MEMORY |    DEVICES    |   BDF   |
+--------+--------+---------+--------+---------------+---------+
| 0      | 8      | 4       | 96 GB  | 12, 3, 4, 1   | cc:00.0 |
| 1      | 8      | 4       | 96 GB  | 13, 0, 5, 2   | b5:00.0 |
+--------+--------+---------+--------+---------------+---------+
"""
LAYOUT_2_21 = """instance-type: trn2n.48xlarge
instance-id: i-aabbccdd123456789
logical-neuroncore-config: 2
+--------+--------+--------+---------------+---------+
| NEURON | NEURON | NEURON |   CONNECTED   |   PCI   |
| DEVICE | CORES  | MEMORY |    DEVICES    |   BDF   |
+--------+--------+--------+---------------+---------+
| 0      | 4      | 96 GB  | 12, 3, 4, 1   | cc:00.0 |
| 1      | 4      | 96 GB  | 13, 0, 5, 2   | b5:00.0 |
+--------+--------+--------+---------------+---------+
"""
LAYOUT_2_25 = """instance-type: trn2n.48xlarge
instance-id: i-aabbccdd123456789
logical-neuroncore-config: 2
+--------+--------+----------+--------+---------------+--------------+---------------+------+
| NEURON | NEURON |  NEURON  | NEURON |   CONNECTED   |     PCI      |      CPU      | NUMA |
| DEVICE | CORES  | CORE IDS | MEMORY |    DEVICES    |     BDF      |   AFFINITY    | NODE |
+--------+--------+----------+--------+---------------+--------------+---------------+------+
| 0      | 4      | 0-3      | 96 GB  | 12, 3, 4, 1   | 0000:cc:00.0 | 48-95,144-191 | 1    |
| 1      | 4      | 4-7      | 96 GB  | 13, 0, 5, 2   | 0000:b5:00.0 | 48-95,144-191 | 1    |
+--------+--------+----------+--------+---------------+--------------+---------------+------+
"""
ALL_PROCS_2_25 = """instance-type: trn2n.48xlarge
instance-id: i-aabbccdd123456789
logical-neuroncore-config: 2
+--------+--------+--------+---------------+---------+--------+------------------------------------------+---------+
| NEURON | NEURON | NEURON |   CONNECTED   |   PCI   |  PID   |                 COMMAND                  | RUNTIME |
| DEVICE | CORES  | MEMORY |    DEVICES    |   BDF   |        |                                          | VERSION |
+--------+--------+--------+---------------+---------+--------+------------------------------------------+---------+
| 0      | 4      | 96 GB  | 12, 3, 4, 1   | cc:00.0 | 268911 | neuron-bench exec --run-as-cc-neff --... | 2.0.0   |
|        |        |        |               |         | 269192 | neuron-ls --show-all-procs               | NA      |
+--------+--------+--------+---------------+---------+--------+------------------------------------------+---------+
| 1      | 4      | 96 GB  | 13, 0, 5, 2   | b5:00.0 | 268912 | neuron-bench exec --run-as-cc-neff --... | 2.0.0   |
+--------+--------+--------+---------------+---------+--------+------------------------------------------+---------+
"""


@pytest.mark.parametrize("output", [LAYOUT_2_21_BETA, LAYOUT_2_21, LAYOUT_2_25], ids=["2.21-beta", "2.21", "2.25"])
def test_every_documented_neuron_ls_layout_gives_the_same_cores(output):
    """Device 0 holds logical cores 0-3 and device 1 cores 4-7 at LNC=2 in each layout, read by
    column name (the 2.21 beta's NEURON CORES are physical, its LOGICAL NC the logical ones)."""
    assert neuron_host.neuron_ls_devices(output) == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert neuron_host.table_lnc(output) == 2
    assert neuron_host.physical_cores_per_device(output, 2) == 8


def test_json_without_core_ids_gives_the_same_cores():
    """``neuron-ls -j`` of Neuron 2.22 to 2.24 (neuron-ls.rst at 2ae3525e) has no
    ``neuroncore_ids``: device d with nc_count 4 holds 4d .. 4d+3, as 2.25's ids say."""
    old = [{"neuron_device": 0, "nc_count": 4}, {"neuron_device": 15, "nc_count": 4}]
    new = [{**d, "neuroncore_ids": list(range(4 * d["neuron_device"], 4 * d["neuron_device"] + 4))} for d in old]
    assert neuron_host.json_device_cores(old) == neuron_host.json_device_cores(new) == {0: [0, 1, 2, 3],
                                                                                        15: [60, 61, 62, 63]}


def test_the_plain_process_table_stands_in_for_json():
    """``neuron-ls -a`` (what a tool without -j offers): runtime processes by device, the
    tools themselves (runtime version NA) left out."""
    assert neuron_host.table_processes(ALL_PROCS_2_25) == {268911: 0, 268912: 1}


def test_a_host_without_instance_metadata_runs_on_the_cores_it_sees(tmp_path):
    """A pod given devices 4-5 with no instance-type line: a Trainium2 host by its devices
    (8 physical cores each), ranks on the cores it was given."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in (4, 5):
        (dev / f"neuron{i}").touch()
    rows = "".join(f"| {d}      | 4      | {d * 4}-{d * 4 + 3}    | 96 GB  | x | 0000:6f:00.0 | 0-47 | 0 |\n" for d in (4, 5))
    table = LAYOUT_2_25.split("\n", 3)[3].rsplit("\n", 4)[0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "neuron-ls"
    head = "\n".join(table.splitlines()[:4])
    tool.write_text("#!/bin/sh\ncat <<'EOF'\nlogical-neuroncore-config: 2\n" + head + "\n" + rows
                    + table.splitlines()[0] + "\nEOF\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={"NEURON_RT_VISIBLE_CORES": "16-23"},
                                      torch_neuron_probe=lambda: "available")
    assert found.instance is None and found.host == "Trainium2 host (instance type not reported)"
    profile = _trn2(found, tmp_path)
    assert (profile.nproc_per_node, profile.first_core) == (8, 16)


def test_unknown_instance_is_named_not_a_traceback(tmp_path):
    """An instance type the suite has no table for is a missing piece of the usage error."""
    dev, bin_dir = _standin_host(tmp_path, instance="trn3.48xlarge")
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={},
                                    torch_neuron_probe=lambda: "available")
    _refused(found, tmp_path, "instance type 'trn3.48xlarge' is not one the suite knows")


@pytest.mark.parametrize("instance", ["trn2n.48xlarge", "trn2u.48xlarge"])
def test_the_other_trn2_48xlarge_types_are_known(tmp_path, instance):
    """trn2n.48xlarge (the instance of the docs' own neuron-ls example) and trn2u.48xlarge
    (trn2-arch.rst) are 16 Trainium2 chips, like trn2.48xlarge: 64 ranks at LNC=2."""
    dev, bin_dir = _standin_host(tmp_path, instance=instance)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={},
                                       torch_neuron_probe=lambda: "available")
    assert _trn2(found, tmp_path).nproc_per_node == 64


def test_trn1_is_refused_with_the_reason(tmp_path):
    dev, bin_dir = _standin_host(tmp_path, instance="trn1.32xlarge", lnc=1, devices=16)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={topology.LNC_ENV: "1"},
                                       torch_neuron_probe=lambda: "available")
    _refused(found, tmp_path, "Trainium1 devices: TorchNeuron needs Trainium2 or Trainium3")


def test_ranks_are_the_cores_the_host_exposes(tmp_path):
    """A container that sees cores 32-63 runs 32 ranks, the first agent's on core 32."""
    dev, bin_dir = _standin_host(tmp_path)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), torch_neuron_probe=lambda: "available",
                                       env={"NEURON_RT_VISIBLE_CORES": "32-47,48-63"})
    profile = _trn2(found, tmp_path)
    assert (profile.nproc_per_node, profile.first_core) == (32, 32)
    plan = _plan(tmp_path, profile, RunSpec(config="dense_native", steps=10, nnodes=2))
    assert [_core_base(argv) for argv in plan.node_argvs] == ["32", "48"]


def _core_base(argv: list[str]) -> str:
    """The first core an agent's line pins (its rank wrapper's --core-base)."""
    assert argv[argv.index("--no-python") + 1] == str(RANK_WRAPPER), argv
    return argv[argv.index("--core-base") + 1]


@pytest.mark.parametrize(("devices", "listed", "env", "message"), [
    (16, 4, {}, r"/dev has neuron\[4, 5, .*, 15\] but neuron-ls lists devices \[0, 1, 2, 3\]"),
    (16, 16, {"NEURON_RT_VISIBLE_CORES": "60-67"}, "NEURON_RT_VISIBLE_CORES=60-67 names cores neuron-ls does not list"),
    (16, 16, {"NEURON_RT_VISIBLE_CORES": "3,5"}, "is not contiguous"),
])
def test_views_of_the_cores_that_disagree_are_a_usage_error(tmp_path, devices, listed, env, message):
    dev, bin_dir = _standin_host(tmp_path, devices=devices, listed=listed)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env=env,
                                       torch_neuron_probe=lambda: "available")
    _refused(found, tmp_path, message)


def test_a_container_whose_neuron_ls_lists_the_whole_instance_runs_on_its_own_devices(tmp_path):
    """neuron-ls "identifies all Neuron devices present in the current instance" (neuron-ls.rst):
    in a container given /dev/neuron4 and /dev/neuron5 it may list all 16 devices with the
    instance lines. The ranks are the cores of the container's own devices (16-23), narrowed by
    NEURON_RT_VISIBLE_CORES; visible cores on another device are refused; the source is said."""
    dev, bin_dir = _standin_host(tmp_path)
    for node in dev.iterdir():
        if node.name not in ("neuron4", "neuron5"):
            node.unlink()
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={},
                                      torch_neuron_probe=lambda: "available")
    profile = _trn2(found, tmp_path)
    assert (profile.nproc_per_node, profile.first_core, found.cores) == (8, 16, list(range(16, 24)))
    assert "the cores of /dev/neuron{4,5} (8 of the 64 neuron-ls lists" in found.core_source, found.core_source
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={"NEURON_RT_VISIBLE_CORES": "20-23"},
                                      torch_neuron_probe=lambda: "available")
    assert (found.cores, found.core_source.split(",")[0]) == ([20, 21, 22, 23], "NEURON_RT_VISIBLE_CORES=20-23")
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={"NEURON_RT_VISIBLE_CORES": "0-3"},
                                      torch_neuron_probe=lambda: "available")
    _refused(found, tmp_path, r"NEURON_RT_VISIBLE_CORES=0-3 names cores .* \(/dev/neuron\* hold 16-23\)")


def test_lnc_env_and_compiler_flag_disagreeing_is_named(tmp_path):
    dev, bin_dir = _standin_host(tmp_path)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), torch_neuron_probe=lambda: "available",
                                    env={topology.LNC_ENV: "2", "NEURON_CC_FLAGS": "--lnc=1"})
    _refused(found, tmp_path, "must agree")


def test_missing_model_folder_is_part_of_the_usage_error(tmp_path):
    """A Neuron host without a model folder is not a trn2 session (never a run of skips)."""
    dev, bin_dir = _standin_host(tmp_path)
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={},
                                    torch_neuron_probe=lambda: "available")
    with pytest.raises(neuron_host.NeuronUnavailable, match="--trn2-model-dir or QWEN3_4B_DIR"):
        tier_profile.require_trn2(found, None)
    with pytest.raises(neuron_host.NeuronUnavailable, match="has no config.json"):
        tier_profile.require_trn2(found, tmp_path / "empty")
    profile = _trn2(found, tmp_path)
    assert (profile.vocab_size, profile.nproc_per_node) == (151936, 64)


def test_neuron_ls_off_path_is_found_in_the_tools_folder_and_said(tmp_path):
    """A shell without the install templates' ``export PATH=/opt/aws/neuron/bin:$PATH``: neuron-ls
    is run from the Neuron tools' folder (``CONFORMANCE_NEURON_BIN_DIR``, default
    /opt/aws/neuron/bin), and the detection says it was found there, not on PATH."""
    from fixtures.rank.neuron_env import NEURON_BIN_ENV, find_neuron_ls

    dev, bin_dir = _standin_host(tmp_path)
    system = "/usr/bin:/bin"  # what the stand-in's shell script needs (cat), and no neuron-ls
    assert find_neuron_ls({"PATH": system, NEURON_BIN_ENV: str(tmp_path / "empty")})[0] is None
    env = {"PATH": system, NEURON_BIN_ENV: str(bin_dir)}
    found = neuron_host.detect_neuron(dev_dir=str(dev), env=env, torch_neuron_probe=lambda: "available")
    assert found.neuron_ls_path == str(bin_dir / "neuron-ls") and found.instance == "trn2.48xlarge"
    assert found.neuron_ls_where.startswith(f"in {bin_dir}, not on PATH"), found.neuron_ls_where
    assert _trn2(found, tmp_path).detection.neuron_ls_where == found.neuron_ls_where
    from reports import neuron_debug  # the failure bundle's neuron-ls -a, found there too

    assert "instance-type: trn2.48xlarge" in neuron_debug.neuron_ls_all(env)
    on_path = find_neuron_ls({"PATH": str(bin_dir), NEURON_BIN_ENV: str(tmp_path / "empty")})
    assert on_path == (str(bin_dir / "neuron-ls"), f"on PATH ({bin_dir / 'neuron-ls'})")
    nowhere = neuron_host.detect_neuron(dev_dir=str(dev), env={"PATH": "", NEURON_BIN_ENV: str(tmp_path)},
                                        torch_neuron_probe=lambda: "available")
    assert f"neuron-ls not on PATH, nor in {tmp_path} ({NEURON_BIN_ENV})" in "; ".join(nowhere.missing)
    assert neuron_host.list_neuron_processes(env={"PATH": "", NEURON_BIN_ENV: str(tmp_path)}).startswith(
        "neuron-ls not on PATH, nor in")


def test_no_device_names_every_missing_piece(tmp_path):
    found = neuron_host.detect_neuron(dev_dir=str(tmp_path), path=str(tmp_path), env={})
    message = "; ".join(found.missing)
    assert "no /dev/neuron* device nodes" in message
    assert "neuron-ls not on PATH" in message
    assert "torch.neuron is not available" in message


def _plan(tmp_path: Path, tier, spec):
    return launch_plan(spec, tier, tmp_path / "run", hf_assets=tier.model_dir or tmp_path,
                            dataset=tmp_path / "c4_test", rdzv_port=29500)


def test_trn2_launch_line_has_64_ranks_and_lnc_env(tmp_path):
    tier = tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path))
    plan = _plan(tmp_path, tier, RunSpec(config="dense_native", steps=10))
    (argv,) = plan.node_argvs
    assert "--nproc_per_node=64" in argv
    assert argv[argv.index("--module") + 1] == tier_profile.TRN2_MODULE
    assert argv[argv.index("--config") + 1] == "dense_native"
    assert argv[argv.index("--hf_assets_path") + 1] == str(tier.model_dir)
    assert argv.count("--hf_assets_path") == 1
    assert argv[argv.index("--training.seq_len") + 1] == "4096"
    assert plan.env[topology.LNC_ENV] == "2"
    assert plan.env[tier_profile.MODEL_DIR_ENV] == str(tier.model_dir)
    # the write-up's module folder (``my_neuron_kernels`` by its bare name), then the repository
    assert plan.env["PYTHONPATH"].split(os.pathsep)[:2] == [str(WRITEUP_MODULES_DIR), str(REPO)]


def test_two_agents_on_one_host_split_the_cores(tmp_path):
    """Two torchrun agents count LOCAL_RANK from 0 each: the second agent's ranks are
    offset by the first's, so NEURON_RT_VISIBLE_CORES never names a core twice."""
    tier = tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path))
    plan = _plan(tmp_path, tier, RunSpec(config="dense_native", steps=10, nnodes=2))
    assert len(plan.node_argvs) == 2 and plan.nproc_per_node == 32
    assert [_core_base(argv) for argv in plan.node_argvs] == ["0", "32"]
    cpu_plan = _plan(tmp_path, tier_profile.cpu_profile(), RunSpec(config="dense_native", nnodes=2))
    assert all("--no-python" not in argv and "--core-base" not in argv for argv in cpu_plan.node_argvs)
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD" not in cpu_plan.env


def test_each_trn2_rank_is_pinned_before_its_interpreter_starts(tmp_path):
    """TorchNeuron may reserve cores as ``import torch`` loads it (the stand-in does: ASSUMED),
    so the trn2 line pins each rank's core in a wrapper torchrun runs with ``--no-python``,
    which then execs this interpreter on ``-m torchtitan.train``; the agent itself runs with
    autoload off (in the recorded command), and the wrapper gives the rank the user's setting."""
    tier = tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path))
    for path in ("native", "hf_backend"):
        plan = _plan(tmp_path, tier, RunSpec(config="dense_native" if path == "native" else "hf_backend",
                                             steps=10, path=TrainingPath(path)))
        (argv,) = plan.node_argvs
        at = argv.index("--no-python")
        assert argv[at + 1:at + 7] == [str(RANK_WRAPPER), "--core-base", "0", "--autoload", "default",
                                       sys.executable], argv
        assert argv[at + 7:at + 9] == ["-m", "torchtitan.train"]
        assert plan.env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"


def test_timeouts_come_from_the_profile(tmp_path):
    """A trn2 run's limit includes start-up (weights) and first-step compilation; a spec's
    own timeout wins."""
    trn2 = tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path))
    cpu = tier_profile.cpu_profile()
    spec = RunSpec(config="dense_native", steps=10)
    assert _plan(tmp_path, trn2, spec).timeout_s == trn2.timeouts.startup_s + trn2.timeouts.compile_s + 10 * trn2.timeouts.step_s
    assert _plan(tmp_path, cpu, spec).timeout_s < _plan(tmp_path, trn2, spec).timeout_s
    assert _plan(tmp_path, cpu, RunSpec(config="dense_native", timeout_s=7.0)).timeout_s == 7.0


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in (SESSION_ENV, "CONFORMANCE_REPORT_DIR")}
    return subprocess.run([sys.executable, "-m", "pytest", *args, "--report-dir", str(tmp_path / "report")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("markexpr", ["trn2", "trn2 and topology", "not cpu and not meta"])
def test_trn2_tier_without_device_is_a_usage_error(tmp_path, markexpr):
    """`pytest -m trn2` here stops with a clear error, never a run of skips."""
    if Path("/dev/neuron0").exists():
        pytest.skip("this machine is a Neuron host")
    proc = _pytest(tmp_path, "-m", markexpr, "-q", "conformance/test_topology.py")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "not ready" in proc.stderr + proc.stdout
    assert "/dev/neuron" in proc.stderr + proc.stdout
    assert "--trn2-model-dir" in proc.stderr + proc.stdout
    assert " passed" not in proc.stdout and " skipped" not in proc.stdout


def test_empty_selection_is_not_green(tmp_path):
    proc = _pytest(tmp_path, "-m", "cpu and meta", "-q", "conformance/test_topology.py")
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "no test was collected" in proc.stdout


# The compiler wrapper's log of a miss, then of a hit, then of a cached failure, as
# aws-neuron-sdk neuron-caching.rst prints them.
DOCS_COMPILE_LOG = """\
2023-08-25 21:51:36.000433: INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache
.
Compiler status PASS
2023-08-25 21:52:23.000451: INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache
2023-08-25 21:52:23.000453: INFO ||NCC_WRAPPER||: Using a cached neff at /var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/MODULE_198775565831884870+d41d8cd9/model.neff. Exiting with a successfully compiled graph.
INFO ||NCC_WRAPPER||: Compile cache path: /var/tmp/neuron-compile-cache
INFO ||NCC_WRAPPER||: Got a cached failed neff at /var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/MODULE_12486829708343293975+d41d8cd9/model.neff. Will skip compilation, please set --retry_failed_compilation for recompilation.
"""


def test_compiles_are_counted_by_the_documented_sequence():
    """"Compile cache path:" opens every graph, a hit as well as a miss: one compile, one hit
    and one cached failure here, not three compiles."""

    assert compile_cache_events(DOCS_COMPILE_LOG) == {"compiled": 1, "cached": 1, "cached_failure": 1}
    assert compile_cache_events("nothing compiled\n") is None


def test_a_failed_neff_replayed_by_the_cache_is_named_with_the_cache(tmp_path):
    """A graph whose compile failed once is skipped from then on ("Got a cached failed neff",
    neuron-caching.rst): a failed run's explanation says so, with the cache and the NEFF, and
    how to compile it again, once per NEFF however many ranks print it."""
    from fixtures.runs.result import cached_failure_text, cached_failures

    assert cached_failures(DOCS_COMPILE_LOG * 2) == [
        ("/var/tmp/neuron-compile-cache", "/var/tmp/neuron-compile-cache/neuronxcc-2.8.0.25+a3ad0f342/"
                                          "MODULE_12486829708343293975+d41d8cd9/model.neff")]
    text = cached_failure_text(DOCS_COMPILE_LOG)
    assert "the compile cache /var/tmp/neuron-compile-cache replayed a failed compile" in text
    assert "--retry_failed_compilation" in text
    assert cached_failure_text("nothing compiled\n") == ""


def test_the_suite_does_not_force_compiler_wrapper_flags(tmp_path):
    """--retry_failed_compilation is the torch-xla flow's wrapper flag (neuron-caching.rst):
    the ranks get NEURON_CC_FLAGS as the user set it, and both cache settings."""
    env = dict(tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path)).rank_env)
    assert "NEURON_CC_FLAGS" not in env
    assert env["NEURON_COMPILE_CACHE_URL"] == env["TORCH_NEURONX_NEFF_CACHE_DIR"] == tier_profile.DOCS_COMPILE_CACHE


def test_cores_another_process_holds_are_named_before_a_launch(tmp_path):
    """Another user's or container's process using the runtime on a device all of whose cores
    are the session's (neuron-ls -j) is refused, named with its pid and device, without asking
    the runtime; one on another device is not."""
    import json

    listing = [{"neuron_device": 0, "nc_count": 4, "neuroncore_ids": [0, 1, 2, 3],
                "neuron_processes": [{"pid": 999999, "command": "python train.py", "neuron_runtime_version": "2.0.0"},
                                     {"pid": 999998, "command": "neuron-ls -j", "neuron_runtime_version": "NA"}]},
               {"neuron_device": 1, "nc_count": 4, "neuroncore_ids": [4, 5, 6, 7],
                "neuron_processes": [{"pid": 999997, "command": "other job", "neuron_runtime_version": "2.0.0"}]}]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "neuron-ls"
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(listing)}\nEOF\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    found = neighbours.check([0, 1, 2, 3], {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}, set(), env=env)
    assert found.refused == ("pid 999999 (not visible here (another PID namespace?)) on device 0: every core of that "
                             "device is the session's (neuron-ls)"), found
    assert neighbours.check([4], {"0": [0, 1, 2, 3], "1": [4, 5, 6, 7]}, {999997}, env=env) == neighbours.CoreCheck()


def test_lnc_comes_from_every_documented_control_and_a_disagreement_names_them(tmp_path):
    """The node's file (/opt/aws/neuron/logical_nc_config, CONFORMANCE_NEURON_LNC_FILE),
    neuron-ls's report (the host's or DRA's per-workload LNC), NEURON_LOGICAL_NC_CONFIG and
    NEURON_RT_VIRTUAL_CORE_SIZE: the LNC is theirs where they agree, the source is said, and a
    disagreement is refused naming each control and its value."""
    from fixtures.tiers import lnc_controls

    node_file = tmp_path / "logical_nc_config"
    node_file.write_text("# launch template\nNEURON_LOGICAL_NC_CONFIG=1")
    env = {lnc_controls.LNC_FILE_ENV: str(node_file)}
    lnc, problem, source = lnc_controls.session_lnc(env, 1, "trn2.48xlarge")
    assert (lnc, problem) == (1, None) and f"the node's file {node_file}" in source and "neuron-ls" in source
    lnc, problem, _ = lnc_controls.session_lnc({**env, "NEURON_RT_VIRTUAL_CORE_SIZE": "2"}, 1, "trn2.48xlarge")
    assert lnc is None and problem.startswith("the LNC controls disagree: neuron-ls's"), problem
    assert f"the node's file {node_file} says 1; NEURON_RT_VIRTUAL_CORE_SIZE in the environment says 2" in problem
    lnc, problem, source = lnc_controls.session_lnc({lnc_controls.LNC_FILE_ENV: str(tmp_path / "none"),
                                                     "NEURON_RT_VIRTUAL_CORE_SIZE": "2", topology.LNC_ENV: "2"},
                                                    None, "trn2.3xlarge")
    assert (lnc, problem) == (2, None) and source == ("NEURON_LOGICAL_NC_CONFIG in the environment and "
                                                      "NEURON_RT_VIRTUAL_CORE_SIZE in the environment"), source
    lnc, _, source = lnc_controls.session_lnc({lnc_controls.LNC_FILE_ENV: str(tmp_path / "none")}, None, "trn2.3xlarge")
    assert (lnc, source) == (2, "no control is set: the trn2.3xlarge default")
    node_file.write_text("NEURON_LOGICAL_NC_CONFIG=two")
    assert "not a number" in lnc_controls.session_lnc(env, None, "trn2.48xlarge")[1]


def test_an_empty_instance_type_line_is_no_instance_type(tmp_path):
    """A pod without instance metadata may print ``instance-type:`` with nothing after it: that
    is no instance type, not the next line's label (``\\s*`` crosses the newline under
    ``re.M``: the session was refused as "instance type 'instance-id:' is not one the suite
    knows"). The host is then recognised by its devices, as with no such line at all."""
    dev, bin_dir = _standin_host(tmp_path)
    tool = bin_dir / "neuron-ls"
    tool.write_text(tool.read_text().replace("instance-type: trn2.48xlarge\ninstance-id: i-0123456789abcdef0",
                                             "instance-type:\ninstance-id:\n"))
    found = neuron_host.detect_neuron(dev_dir=str(dev), path=str(bin_dir), env={},
                                      torch_neuron_probe=lambda: "available")
    assert found.instance is None, found.instance
    assert found.host == "Trainium2 host (instance type not reported)"
    assert _trn2(found, tmp_path).nproc_per_node == 64


def test_an_empty_lnc_file_value_is_not_the_next_lines(tmp_path):
    """The node's LNC file with ``NEURON_LOGICAL_NC_CONFIG=`` and nothing after it sets no
    number: the next line is not its value (the same ``\\s*`` across a newline as above)."""
    from fixtures.tiers import lnc_controls

    path = tmp_path / "logical_nc_config"
    path.write_text("NEURON_LOGICAL_NC_CONFIG=\n2\n")
    value, problem = lnc_controls.file_lnc(str(path))
    assert value is None and problem and "''" in problem, (value, problem)


def test_the_runtimes_execution_timeout_is_set_and_said(tmp_path, monkeypatch):
    """The docs leave NEURON_RT_EXEC_TIMEOUT to the user (600 s on trn1, 30 in a table, silent on
    trn2): every trn2 rank gets the profile's step allowance, or the user's own value, and the
    header says which, beside the compile allowance that is not under it."""
    monkeypatch.delenv(tier_profile.EXEC_TIMEOUT_ENV, raising=False)
    tier = tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path))
    assert dict(tier.rank_env)[tier_profile.EXEC_TIMEOUT_ENV] == "120"
    assert "NEURON_RT_EXEC_TIMEOUT=120 s (set by the suite" in tier_profile.exec_timeout_line(dict(tier.rank_env), tier.timeouts.compile_s)
    monkeypatch.setenv(tier_profile.EXEC_TIMEOUT_ENV, "900")
    mine = tier_profile.trn2_profile("trn2.48xlarge", 2, qwen3_4b.model_folder(tmp_path))
    assert dict(mine.rank_env)[tier_profile.EXEC_TIMEOUT_ENV] == "900"
    assert "NEURON_RT_EXEC_TIMEOUT=900 s (the user's own)" in tier_profile.exec_timeout_line(dict(mine.rank_env), mine.timeouts.compile_s)
    assert tier_profile.EXEC_TIMEOUT_ENV not in dict(tier_profile.cpu_profile().rank_env)


def test_the_header_says_how_much_dev_shm_the_ranks_have(monkeypatch):
    """A pod without a memory-backed /dev/shm has its container runtime's 64 MiB: said, with what
    a pod mounts instead; a larger one is said plainly; an unreadable one is named."""
    import collections

    fs = collections.namedtuple("fs", "f_frsize f_blocks f_bavail")
    monkeypatch.setattr(neuron_host.os, "statvfs", lambda path: fs(4096, 16384, 16000))
    assert neuron_host.dev_shm_line().startswith("/dev/shm: 64 MiB, 62 MiB free (a container's default size")
    monkeypatch.setattr(neuron_host.os, "statvfs", lambda path: fs(4096, 1 << 22, 1 << 22))
    assert neuron_host.dev_shm_line() == "/dev/shm: 16384 MiB, 16384 MiB free"
    monkeypatch.undo()
    assert "not readable" in neuron_host.dev_shm_line("/no/such/dir")
