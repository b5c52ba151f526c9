"""How each rank gets its own NeuronCore for the torchtitan installed (``fixtures.tiers.core_pinning``):
the trainer's device choice read from its source, the launch form it leads to on each kind of
host, and the launch lines of each form (the wrapper pins, unsets, or each rank has its agent)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from fixtures.repo import REPO_ROOT
from fixtures.runs.plan import RANK_WRAPPER, launch_plan
from fixtures.runs.spec import RunSpec
from fixtures.tiers import core_pinning, tier_profile
from fixtures.tiers.core_pinning import CorePinning, DeviceSelection
from meta_tests import qwen3_4b

pytestmark = pytest.mark.meta

WHEELS = REPO_ROOT.parent / "shared" / "wheels"


def _wheel_trainer(commit: str) -> str:
    wheel = next(WHEELS.glob(f"torchtitan-0.2.2+git{commit}-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        return z.read("torchtitan/trainer.py").decode()


@pytest.mark.skipif(not WHEELS.is_dir(), reason="the pinned upstream wheels (../shared/wheels) are not here")
@pytest.mark.parametrize("commit, selection", [("5059f32", DeviceSelection.LOCAL_RANK),
                                               ("b5bcd76", DeviceSelection.VISIBLE_DEVICES)])
def test_each_upstream_snapshot_is_read_for_its_device_choice(commit, selection):
    """The fork's vintage (5059f32c5) builds ``torch.device(f"{device_type}:{LOCAL_RANK}")``;
    from torchtitan #4103 on (b5bcd76c6) the trainer calls ``utils.get_local_device()``."""
    found = core_pinning.read_trainer_device(_wheel_trainer(commit), "trainer.py")
    assert found.selection is selection, found
    assert found.evidence.startswith("trainer.py:") and ("LOCAL_RANK" in found.evidence
                                                         or "get_local_device(" in found.evidence)


def test_the_installed_trainer_is_read_without_importing_it():
    """torchtitan 0.3.0 (this venv) selects by what is visible; nothing of torchtitan is imported."""
    import sys

    before = set(sys.modules)
    found = core_pinning.trainer_device()
    assert found.selection is DeviceSelection.VISIBLE_DEVICES and "trainer.py:" in found.evidence
    assert not {m for m in set(sys.modules) - before if m.startswith("torchtitan")}


def test_a_trainer_whose_choice_is_not_found_says_so():
    found = core_pinning.read_trainer_device("def train():\n    pass\n", "x.py")
    assert found.selection is DeviceSelection.NOT_FOUND


@pytest.mark.parametrize("selection, first_core, agents, form", [
    (DeviceSelection.VISIBLE_DEVICES, 0, 1, CorePinning.VISIBLE_CORE),
    (DeviceSelection.VISIBLE_DEVICES, 16, 2, CorePinning.VISIBLE_CORE),
    (DeviceSelection.LOCAL_RANK, 0, 1, CorePinning.TORCHNEURON_DEFAULT),
    (DeviceSelection.LOCAL_RANK, 16, 1, CorePinning.AGENT_PER_RANK),  # a pod given cores 16-17
    (DeviceSelection.LOCAL_RANK, 0, 2, CorePinning.AGENT_PER_RANK),  # a second agent restarts LOCAL_RANK
    (DeviceSelection.NOT_FOUND, 0, 1, CorePinning.AGENT_PER_RANK),  # works whichever way it picks
])
def test_the_launch_form_follows_the_trainer_and_the_host(selection, first_core, agents, form):
    assert core_pinning.pinning(selection, first_core, agents) is form


def _tier(tmp_path: Path, selection: DeviceSelection, cores=None, instance="trn2.48xlarge"):
    tier = tier_profile.trn2_profile(instance, 2, qwen3_4b.model_folder(tmp_path), cores=cores)
    return dataclasses.replace(tier, trainer_device=core_pinning.TrainerDevice(selection, "trainer.py:1"))


def _plan(tmp_path, tier, spec):
    return launch_plan(spec, tier, tmp_path / "run", hf_assets=tier.model_dir, dataset=tmp_path / "c4_test",
                       rdzv_port=29500)


def _wrapper_args(argv: list[str]) -> list[str]:
    at = argv.index("--no-python")
    assert argv[at + 1] == str(RANK_WRAPPER)
    return argv[at + 2:at + 4]


def test_a_local_rank_trainer_on_a_whole_host_runs_the_writeups_line(tmp_path):
    """64 ranks under one agent, NEURON_RT_VISIBLE_CORES left to TorchNeuron (LOCAL_RANK)."""
    plan = _plan(tmp_path, _tier(tmp_path, DeviceSelection.LOCAL_RANK), RunSpec(config="dense_native", steps=10))
    (argv,) = plan.node_argvs
    assert "--nproc_per_node=64" in argv and _wrapper_args(argv) == ["--core-base", "torchneuron"]
    assert plan.env["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"  # the agent never loads TorchNeuron


def test_a_local_rank_trainer_in_a_pod_gets_an_agent_per_rank(tmp_path):
    """Cores 16-17: two agents of one rank each (LOCAL_RANK 0 in both, index 0 its only visible
    core), each pinned to its own core, one rendezvous."""
    plan = _plan(tmp_path, _tier(tmp_path, DeviceSelection.LOCAL_RANK, cores=[16, 17]),
                 RunSpec(config="dense_native", steps=10))
    assert len(plan.node_argvs) == 2 and plan.nproc_per_node == 1 and plan.ranks == 2
    assert [_wrapper_args(a) for a in plan.node_argvs] == [["--core-base", "16"], ["--core-base", "17"]]
    assert all("--nnodes=2" in a and "localhost:29500" in a for a in plan.node_argvs)


def test_a_visible_device_trainer_keeps_one_agent_and_a_core_per_rank(tmp_path):
    plan = _plan(tmp_path, _tier(tmp_path, DeviceSelection.VISIBLE_DEVICES, cores=[16, 17]),
                 RunSpec(config="dense_native", steps=10))
    (argv,) = plan.node_argvs
    assert "--nproc_per_node=2" in argv and _wrapper_args(argv) == ["--core-base", "16"]


def _wrapper(base: str, env: dict[str, str]) -> dict[str, str]:
    proc = subprocess.run([str(RANK_WRAPPER), "--core-base", base, "--autoload", "default", "env"],
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "LOCAL_RANK": "3", **env})
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_the_wrapper_pins_or_leaves_the_core_to_torchneuron():
    """``--core-base N``: NEURON_RT_VISIBLE_CORES = N + LOCAL_RANK. ``--core-base torchneuron``:
    unset, even where the container set it to a list (every rank would see, and reserve, all)."""
    assert _wrapper("16", {})["NEURON_RT_VISIBLE_CORES"] == "19"
    assert "NEURON_RT_VISIBLE_CORES" not in _wrapper("torchneuron", {"NEURON_RT_VISIBLE_CORES": "0-63"})


@pytest.mark.skipif(not WHEELS.is_dir(), reason="the pinned upstream wheels (../shared/wheels) are not here")
def test_the_torchtitan_neuron_standin_uses_only_the_forks_vintage_api():
    """The stand-in of torchtitan-neuron (``qwen3_nki_moe_config``) is written against what the
    fork carries, upstream main at 5059f32c5: every torchtitan name it imports is defined (or
    re-exported) by that snapshot's module, read from its wheel."""
    import ast

    source = REPO_ROOT / "neuron_standins" / "torchtitan-neuron" / "torchtitan_neuron" / "models" / "qwen3" / \
        "config_registry.py"
    wheel = next(WHEELS.glob("torchtitan-0.2.2+git5059f32-*.whl"))
    missing = []
    with zipfile.ZipFile(wheel) as z:
        files = set(z.namelist())
        for node in ast.walk(ast.parse(source.read_text())):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchtitan")):
                continue
            path = node.module.replace(".", "/")
            module = f"{path}/__init__.py" if f"{path}/__init__.py" in files else f"{path}.py"
            tree = ast.parse(z.read(module).decode())
            defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            defined |= {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                        if isinstance(t, ast.Name)}
            defined |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
            missing += [f"{node.module}.{a.name}" for a in node.names if a.name not in defined]
    assert missing == [], f"names the fork's vintage lacks: {missing}"
