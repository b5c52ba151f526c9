"""The stack preflight: a stack whose ranks cannot import fails every launch-needing
contract at once with one message, and nothing is launched."""

from __future__ import annotations

import dataclasses
import os

import pytest

from fixtures.launch import stack_preflight
from fixtures.tiers.tier_profile import cpu_profile
from fixtures.runs.cache import RunCache
from fixtures.data.assets import Assets
from fixtures.runs.inputs import RunInputs
from fixtures.runs.catalogue import Catalogue, Entry
from fixtures.repo import REPO_ROOT as REPO
from fixtures.runs.spec import RunSpec, TrainingPath

pytestmark = pytest.mark.meta


@pytest.fixture
def broken_module(tmp_path, monkeypatch):
    """A rank-side module that imports something not installed."""
    (tmp_path / "conformance_preflight_fake.py").write_text("import no_such_module_for_preflight\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p))
    return "conformance_preflight_fake"


def test_preflight_names_the_missing_module(broken_module):
    found = stack_preflight.check((stack_preflight.ENTRY_MODULE, broken_module), dict(os.environ))
    assert not found.ok
    assert f"`import {broken_module}`" in found.message
    assert "No module named 'no_such_module_for_preflight'" in found.message
    assert "no run that imports it was launched" in found.message


def test_preflight_passes_on_this_stack():
    assert stack_preflight.check((stack_preflight.ENTRY_MODULE,), dict(os.environ)).ok


def test_importer_and_its_undeclared_requirement_are_named():
    """As on a CPU-only torch without triton: the file that imports the missing module, its
    package, and that the package does not declare it."""
    import torchtitan

    importer = os.path.join(os.path.dirname(torchtitan.__file__), "distributed", "__init__.py")
    message = stack_preflight.explain({"module": "torchtitan.train", "error": "ModuleNotFoundError: No module named 'triton'",
                                       "missing": "triton", "frames": [importer]})
    assert "triton is imported by" in message and "(package torchtitan" in message
    assert "does not declare it in its requirements: torchtitan should have" in message


def test_no_launch_after_a_failed_preflight(tmp_path, broken_module):
    tier = dataclasses.replace(cpu_profile(), titan_module=broken_module)
    spec = RunSpec(config="dense_native", steps=1)
    runs = Catalogue([Entry("one_step", lambda tier: spec)])
    cache = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path), tmp_path), runs=runs)
    with pytest.raises(stack_preflight.StackPreflightFailed, match="no_such_module_for_preflight"):
        cache.get(spec)
    assert not cache.run_dir(spec).exists()


def test_missing_api_of_a_dependency_names_the_bound_that_is_not_declared():
    """As with tyro 0.8.14 under torchtitan 0.3.0: an attribute the importer uses is absent
    from the installed dependency; the message names the file, its package, the dependency's
    installed version and how the package declares it."""
    import torchtitan

    importer = os.path.join(os.path.dirname(torchtitan.__file__), "config", "manager.py")
    message = stack_preflight.explain({
        "module": "torchtitan.train", "missing": None, "frames": [importer],
        "error": "AttributeError: module 'tyro' has no attribute 'constructors'"})
    assert f"raised in {importer} (package torchtitan" in message
    assert "which uses tyro " in message
    assert "torchtitan declares tyro without a version bound" in message


def test_a_module_only_some_runs_import_fails_those_runs_alone(tmp_path, broken_module):
    """A transformers-backend module (or an override) that does not import fails the runs
    that import it, named once with them; a native run's preflight does not import it."""
    tier = dataclasses.replace(cpu_profile(), hf_backend_module=broken_module)
    native = RunSpec(config="dense_native", steps=1)
    backend = RunSpec(config="hf_backend", path=TrainingPath.HF_BACKEND, steps=1)
    cache = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path), tmp_path),
                     runs=Catalogue([Entry("native", lambda t: native), Entry("backend", lambda t: backend)]))
    assert broken_module not in cache.guards.rank_imports(native)
    with pytest.raises(stack_preflight.StackPreflightFailed, match="needed by: hf_backend steps=1"):
        cache.guards.require_stack_preflight(backend)
    cache.guards.require_stack_preflight(native)  # its modules import and its config builds
    found = {tuple(r["runs"]): r["ok"] for r in cache.guards.preflight_results if r["runs"]}
    assert found == {("hf_backend steps=1",): False, ("dense_native steps=1",): True}, found


def test_a_config_that_does_not_build_is_a_harness_gap_named_once(tmp_path):
    """A suite config function that raises in the suite's own code (here: a field the
    installed torchtitan does not have) stops the runs of that config with one message that
    calls it a harness gap and names the suite's line; the write-up's own config is reported
    line by line as stack facts."""
    module = tmp_path / "conformance_preflight_config.py"
    module.write_text("from torchtitan.models.common.rope import CosSinRoPE\n"
                      "def dense_native():\n"
                      "    return CosSinRoPE.Config(dim=16, no_such_field=1)\n")
    tier = dataclasses.replace(cpu_profile(), titan_module="conformance_preflight_config")
    spec = RunSpec(config="dense_native", steps=1)
    cache = RunCache(tmp_path / "runs", RunInputs(tier, Assets(tmp_path), tmp_path),
                     runs=Catalogue([Entry("one", lambda t: spec)]),
                     rank_env={"PYTHONPATH": f"{tmp_path}:{REPO}"})
    with pytest.raises(stack_preflight.StackPreflightFailed) as err:
        cache.guards.require_stack_preflight(spec)
    message = str(err.value)
    assert "dense_native() of conformance_preflight_config does not build" in message
    assert "HARNESS GAP" in message and "no_such_field" in message
    facts = [r for r in cache.guards.preflight_results if r.get("kind") == "stack fact"]
    assert len(facts) == 1 and 'model_registry("4B", attn_backend="sdpa")' in facts[0]["message"]
    assert "STACK FACT" in facts[0]["message"]
