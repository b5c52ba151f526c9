"""A run's identity (the run cache's key) changes with everything that can change the run."""

from __future__ import annotations

import json
import os
import sys

import pytest

from fixtures.runs import run_identity
from fixtures.runs.cache import RunCache
from fixtures.data.assets import Assets
from fixtures.runs.inputs import RunInputs
from fixtures.runs.catalogue import DENSE_NATIVE
from fixtures.tiers import machine
from fixtures.tiers.tier_profile import cpu_profile, trn2_profile

pytestmark = pytest.mark.meta


def _key(tmp_path, tier=None, **kwargs) -> str:
    cache = RunCache(tmp_path / "runs", RunInputs(tier or cpu_profile(), Assets(tmp_path / "assets-x"), tmp_path),
                     **kwargs)
    run = cache.resolve(DENSE_NATIVE)
    return cache.key(run.launched, run.folders)


# Each setting that changes what a run computes or where it compiles to, with a value it can
# take: the Neuron runtime's and compiler's (every ``NEURON_*`` setting is part of the key) and
# every variable that moves torch's, MKL's or oneDNN's kernel choice (``machine.KERNEL_PATH_ENV``:
# ``ATEN_CPU_CAPABILITY`` makes torch take another instruction set's kernels, whose fp32
# rounding can differ, so a session under avx2 never reads a run computed on the AVX-512 paths).
SETTINGS = {"NEURON_RT_LOG_LEVEL": "INFO", "NEURON_COMPILE_CACHE_URL": "/tmp/neff",
            "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "MKL_CBWR": "COMPATIBLE",
            "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def test_every_kernel_path_variable_has_a_value_here():
    assert set(machine.KERNEL_PATH_ENV) <= set(SETTINGS), set(machine.KERNEL_PATH_ENV) - set(SETTINGS)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_a_setting_that_changes_the_run_is_part_of_the_key(tmp_path, monkeypatch, name):
    """Set alone on a session where none of them is set, it gives another key."""
    for each in SETTINGS:
        monkeypatch.delenv(each, raising=False)
    plain = _key(tmp_path)
    monkeypatch.setenv(name, SETTINGS[name])
    assert _key(tmp_path) != plain


def test_the_model_folders_files_are_part_of_the_key(tmp_path):
    folder = tmp_path / "Qwen3-4B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen3", "vocab_size": 64, "num_hidden_layers": 2, "hidden_size": 8,
        "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
        "max_position_embeddings": 64, "rope_theta": 1e6, "rms_norm_eps": 1e-6}))
    (folder / "model.safetensors").write_bytes(b"x" * 10)
    tier = trn2_profile("trn2.3xlarge", 2, folder)
    before = _key(tmp_path, tier)
    (folder / "model.safetensors").write_bytes(b"y" * 11)  # a re-download
    assert _key(tmp_path, tier) != before


def test_a_locally_patched_installed_package_changes_its_stamp(tmp_path, monkeypatch):
    package = tmp_path / "site" / "fakepkg_for_identity"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    before = run_identity.installed_tree_stamp(("fakepkg_for_identity",))
    (package / "__init__.py").write_text("x = 22\n")  # same version, edited in place
    os.utime(package / "__init__.py", ns=(1, 1))
    after = run_identity.installed_tree_stamp(("fakepkg_for_identity",))
    assert before and after and before != after
    assert set(run_identity.installed_tree_stamp()) >= {"torch", "torchtitan", "transformers"}
    sys.modules.pop("fakepkg_for_identity", None)


def _tiers(tmp_path):
    from meta_tests import qwen3_4b

    return [cpu_profile(), qwen3_4b.trn2_tier(tmp_path)]


def test_two_runs_never_share_a_description(tmp_path):
    """The description keys the launch history, the plan's history, the trusted artifacts and
    the upgrade page's figures: two catalogue runs that compute different things must not
    share one (hf_backend_as_upstream and hf_backend_rotary_fixed once both read
    ``hf_backend steps=10 load=hf_tied export=float32``). Entries that compute the same thing
    are one launch (``Catalogue.launch_of``) and may."""
    from fixtures.runs.catalogue import CATALOGUE

    for tier in _tiers(tmp_path):
        seen: dict[str, tuple[str, object]] = {}
        for entry in CATALOGUE.entries(tier):
            spec = entry.build(tier).computed()
            name, other = seen.setdefault(spec.describe(), (entry.name, spec))
            assert other == spec, f"{tier.name}: {name} and {entry.name} both describe as {spec.describe()!r}"


def test_run_dir_is_the_folder_get_launches_into(tmp_path, monkeypatch):
    """``run_dir`` and ``get`` key the same launched spec, also where the cache merges two
    entries' recordings into one launch and where a run takes its clipping threshold from
    another run (before, ``run_dir`` keyed the spec as asked)."""
    from fixtures.runs.catalogue import CATALOGUE
    from fixtures.runs.result import RunResult

    tier = cpu_profile()
    cache = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path / "assets-x"), tmp_path))
    launched = []

    def fake_get(spec, requested_by=None, expected_to_fail=False):  # the reference run's result, no launch
        launched.append(spec)
        result = RunResult.__new__(RunResult)
        result.grad_norms = lambda: [1.0, 2.0, 3.0]
        return result

    monkeypatch.setattr(cache, "get", fake_get)
    clipped = next(e.build(tier) for e in CATALOGUE.entries(tier) if e.build(tier).max_norm_from is not None)
    expected = cache.key(clipped.with_max_norm([1.0, 2.0, 3.0]), cache.resolve(clipped).folders)
    assert cache.run_dir(clipped).name == expected and launched == [clipped.max_norm_from] * 2
    plain = CATALOGUE.spec("dense_native", tier)
    assert cache.run_dir(plain).name == cache.key(CATALOGUE.launch_of(plain, tier), cache.resolve(plain).folders)
    # two entries that differ only in what they record share one launch, and so one folder
    assert cache.run_dir(CATALOGUE.spec("schedule_and_clip", tier)) == cache.run_dir(
        CATALOGUE.spec("dense_native_optimizer_tensors", tier))


def test_each_kernel_path_compiles_into_its_own_inductor_cache(monkeypatch):
    """Inductor's cache is not keyed by ATEN_CPU_CAPABILITY: ranks of sessions on different
    kernel paths get different cache folders (a shared one broke the hf_backend runs under
    ATEN_CPU_CAPABILITY=default), and a folder the user chose is kept."""
    from fixtures.runs.plan import rank_environment

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    native = rank_environment(cpu_profile(), {})["TORCHINDUCTOR_CACHE_DIR"]
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert rank_environment(cpu_profile(), {})["TORCHINDUCTOR_CACHE_DIR"] != native
    from fixtures.runs.plan import inductor_default_dir

    # torch writes its default into os.environ once Inductor ran in the pytest process: still keyed
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor_default_dir()))
    assert rank_environment(cpu_profile(), {})["TORCHINDUCTOR_CACHE_DIR"] != str(inductor_default_dir())
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/chosen")
    assert "TORCHINDUCTOR_CACHE_DIR" not in rank_environment(cpu_profile(), {})  # the launcher's env carries it


@pytest.mark.parametrize("value", [None, "default", "avx2", "avx512", "AVX2", ""])
def test_the_kernel_path_is_worked_out_as_torch_chooses_it(value):
    """fixtures.tiers.machine infers torch's CPU kernel path without importing torch (a
    foreign environment may have none, and the pytest process on a Neuron host must not start
    TorchNeuron): the same answer as torch's own under every value of ATEN_CPU_CAPABILITY."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    if value is not None:
        env["ATEN_CPU_CAPABILITY"] = value
    code = ("import sys; from fixtures.tiers import machine; inferred = machine.cpu_capability(); "
            "assert 'torch' not in sys.modules; import torch; print(inferred, torch.backends.cpu.get_cpu_capability())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    inferred, torchs = out.stdout.split()
    assert inferred == torchs


def test_the_suites_own_test_tools_leave_the_environment_digest_as_it_was(monkeypatch):
    """A venv with the dev extra (the EKS manifests' validator) keys its runs as one without:
    ``DEV_ONLY_DISTRIBUTIONS`` is left out of the digest, and it is exactly what the dev extra
    pulls in that nothing else installed requires (so no rank-side package hides there)."""
    import importlib.metadata as md
    import re
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from fixtures.repo import REPO_ROOT
    from fixtures.tiers import stack

    installed = {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}

    def closure(names):
        seen, todo = set(), [canonicalize_name(n) for n in names]
        while todo:
            name = todo.pop()
            if name in seen or name not in installed:
                continue
            seen.add(name)
            for line in installed[name].requires or []:
                req = Requirement(line)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(canonicalize_name(req.name))
        return seen

    dev = [re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0] for r in
           tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]]
    assert all(canonicalize_name(n) in installed for n in dev), f"the dev extra is not installed here: {dev}"
    only_dev = closure(dev) - closure(set(installed) - closure(dev))
    assert only_dev == stack.DEV_ONLY_DISTRIBUTIONS, only_dev
    with_tools = stack.environment_digest()
    monkeypatch.setattr(md, "distributions", lambda: [d for d in installed.values()
                                                      if canonicalize_name(d.metadata["Name"]) not in only_dev])
    monkeypatch.setattr(stack.metadata, "distributions", md.distributions)
    assert stack.environment_digest() == with_tools


def test_the_launcher_back_ends_cluster_is_part_of_the_key_and_the_local_one_adds_nothing(tmp_path):
    """A run launched through a scheduler is another run than the local one (the Slurm back
    end's identity: cluster, partition, nodes and hosts); the local back end adds nothing, so the
    suite's keys of always hold."""
    from fixtures.launch.backends.base import Backend
    from fixtures.launch.backends.local import LocalBackend
    from fixtures.runs.catalogue import CATALOGUE

    class Cluster(Backend):  # only its identity is read here; nothing launches
        name = "slurm"

        def __init__(self, hosts):
            self.hosts = hosts

        def identity(self):
            return {"launcher": self.name, "cluster": "c", "partition": None, "nodes": ["n1", "n2"], "hosts": self.hosts}

    tier = cpu_profile()
    spec = CATALOGUE.spec("dense_native", tier)

    def key(backend):
        cache = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path / "assets-x"), tmp_path), backend=backend)
        return cache.key(spec, cache.resolve(spec).folders)

    plain = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path / "assets-x"), tmp_path))
    assert key(LocalBackend()) == plain.key(spec, plain.resolve(spec).folders)
    assert len({key(LocalBackend()), key(Cluster(["a"])), key(Cluster(["b"]))}) == 3
