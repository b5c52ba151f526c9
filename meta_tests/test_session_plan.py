"""The session plan: launches, graphs, disk and time before the first launch; the disk
preflight and the session budget."""

from __future__ import annotations

import json
import shutil
from collections import namedtuple

import pytest

from fixtures.rank.model_shapes import QWEN3_4B_INSTRUCT_2507
from meta_tests import qwen3_4b
from fixtures.runs import session_plan
from fixtures.runs.cache import RunCache
from fixtures.runs.launch_guards import SessionBudgetSpent
from fixtures.data.assets import Assets
from fixtures.runs.inputs import RunInputs
from fixtures.runs.catalogue import (ADAMW_STEPS, CATALOGUE, DENSE_NATIVE, DENSE_NATIVE_OPTIMIZER_TENSORS, Catalogue,
                                     SCHEDULE_AND_CLIP, Entry, resumed, uninterrupted)
from fixtures.tiers.tier_profile import cpu_profile
from fixtures.runs.spec import RunSpec
from fixtures.launch.culprit import RootCause
from fixtures.launch.launcher import LaunchOutcome
from fixtures.runs.launch_guards import StackFactStops
from fixtures.runs.result import RunResult

pytestmark = pytest.mark.meta


def test_qwen3_4b_parameters_and_what_a_launch_writes(tmp_path):
    """Qwen3-4B counts 4.02 B parameters (the published size). On trn2 the optimizer dumps hold
    the first block only (0.1 B parameters): the AdamW run's ``ADAMW_STEPS`` recorded steps
    write three float32 copies of it each (4.8 GB, and the logs; every parameter would be 48 GB a
    step); a launch recording nothing and saving no checkpoint writes only its logs; the
    uninterrupted resume run writes two full checkpoints (steps 5 and 10, the restart's choice:
    weights and two moments, 48 GB each) and its last-step model (16 GB), the resumed run only
    its last-step model (its seeds are linked)."""
    params = session_plan.dense_parameters(QWEN3_4B_INSTRUCT_2507)
    assert 4.0e9 < params < 4.05e9, params
    block = session_plan.dense_layer_parameters(QWEN3_4B_INSTRUCT_2507)
    assert 0.10e9 < block < 0.102e9, block
    tier = qwen3_4b.trn2_tier(tmp_path)
    dumps = session_plan.launch_disk_bytes(DENSE_NATIVE_OPTIMIZER_TENSORS, tier, 64)
    plain = session_plan.launch_disk_bytes(DENSE_NATIVE, tier, 64)
    assert 5.0e9 < dumps < 5.2e9 and plain < 1e9, (dumps, plain)  # 4.84 GB and 64 ranks of logs
    whole = session_plan.launch_disk_bytes(uninterrupted(tier), tier, 64)
    again = session_plan.launch_disk_bytes(resumed(tier), tier, 64)
    assert 112e9 < whole < 113e9 and 16e9 < again < 17e9, (whole, again)


def test_the_plan_serves_specs_that_differ_only_in_records_with_one_launch(tmp_path):
    plan = session_plan.plan(CATALOGUE, qwen3_4b.trn2_tier(tmp_path))
    served = [p for p in plan.launches if "dense_native_optimizer_tensors" in p.names]
    assert len(served) == 1 and served[0].names == ("dense_native_optimizer_tensors", "schedule_and_clip")
    assert served[0].spec.record_optimizer_steps == ADAMW_STEPS
    assert plan.graphs < len(plan.launches)  # steps, checkpoints and records compile nothing new
    assert "launches" in plan.text() and "GB of disk" in plan.text()


def test_a_launch_with_another_microbatch_shape_is_another_graph(tmp_path):
    """A NEFF is compiled for its input shapes: two launches that differ only in the local
    batch (or the sequence length) are two graphs; in the steps, one."""

    tier = qwen3_4b.trn2_tier(tmp_path)
    launches = [session_plan.PlannedLaunch(("a",), RunSpec(config="dense_native", **kw), 64, 1.0, 0)
                for kw in ({}, {"local_batch": 2}, {"seq_len": 8192}, {"steps": 3})]
    assert len({launch.graph for launch in launches}) == 3
    assert tier.local_batch == 1


def test_the_disk_preflight_refuses_with_the_figures(tmp_path, monkeypatch):
    plan = session_plan.plan(CATALOGUE, qwen3_4b.trn2_tier(tmp_path))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 10**9))
    with pytest.raises(session_plan.NotEnoughDisk, match=r"which has 1 GB free"):
        session_plan.check_disk(plan, tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**13, 0, 10**13))
    session_plan.check_disk(plan, tmp_path)


def test_the_plan_estimates_from_the_last_launches_recorded_on_this_host(tmp_path):
    """--plan's estimate uses the wall time, first step (the compile on trn2) and step time
    the run cache recorded for the same run of the same tier on this host; a record of
    another tier, a failed launch or an unreadable line is not used; runs never launched here
    stay at their timeouts."""
    tier = cpu_profile()
    catalogue = Catalogue([Entry("schedule_and_clip", lambda t: SCHEDULE_AND_CLIP),  # one launch with the next
                           Entry("optimizer", lambda t: DENSE_NATIVE_OPTIMIZER_TENSORS),
                           Entry("other", lambda t: session_plan.RunSpec(config="dense_native", steps=3))])
    log = tmp_path / "launches.jsonl"
    described = DENSE_NATIVE_OPTIMIZER_TENSORS.describe()
    log.write_text("\n".join([
        json.dumps({"spec": described, "tier": "cpu", "wall_s": 30.0, "ok": True}),
        json.dumps({"spec": described, "tier": "cpu", "wall_s": 14.0, "ok": True, "first_step_s": 0.5, "step_s": 0.09}),
        json.dumps({"spec": described, "tier": "cpu", "wall_s": 99.0, "ok": False}),
        json.dumps({"spec": "dense_native steps=3", "tier": "trn2", "wall_s": 500.0, "ok": True}),
        "not json"]) + "\n")
    planned = session_plan.plan(catalogue, tier, session_plan.recorded_launches(log, "cpu"))
    text = planned.text()
    assert "estimated: about 0.00389 h for the 1 launches recorded on this host" in text, text
    assert "plus 1 never launched here" in text and "last here 14 s (first step 0.5 s, then 0.09 s a step)" in text
    assert session_plan.plan(catalogue, tier).estimate() is None


def test_a_spent_budget_launches_nothing_and_says_what_was_not_run(tmp_path):
    cache = RunCache(tmp_path / "runs", RunInputs(cpu_profile(), Assets(tmp_path), tmp_path),
                     runs=Catalogue([Entry("dense_native", lambda t: DENSE_NATIVE)]), budget_s=100.0)
    cache.guards.launched_s = 120.0
    with pytest.raises(SessionBudgetSpent, match="not launched: dense_native steps=10"):
        cache.guards.require_budget_and_disk(DENSE_NATIVE)
    assert cache.guards.not_launched == [{"run": "dense_native steps=10", "why": "session budget spent"}]


def test_a_cause_that_kills_two_training_runs_before_step_one_stops_the_rest(tmp_path):
    """torch 2.13 killed every training run at FSDP set-up, and 29 launches each died about
    17 s in. The second training run a rank's exception kills before step 1 makes it a fact of
    the stack: no further training run is launched ('not run: <fact>', one entry each in the
    report); a run that is meant to fail, or died after training, never counts."""

    cache = RunCache(tmp_path / "runs", RunInputs(cpu_profile(), Assets(tmp_path), tmp_path))
    fact = "ValueError: When dp_mesh_dims is provided, all parameters must be DTensors on the full SPMD mesh"

    def died(name: str, message: str = fact) -> tuple:
        spec = CATALOGUE.spec(name, cache.tier)
        log = tmp_path / f"{name}.stderr"  # the rank's own log names the exception; torchrun's summary does not
        log.write_text(f"Traceback (most recent call last):\n  File \"x.py\", line 1\n{message}\n"
                       "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
        outcome = LaunchOutcome(argv=[], env_added={}, returncode=1, timed_out=False, wall_s=17.0,
                                console_log=tmp_path / "c", rank_logs={0: {"stderr": str(log)}},
                                root_cause=RootCause(rank=0, message="To enable traceback see: "
                                                     "https://pytorch.org/docs/stable/elastic/errors.html"))
        return spec, RunResult(spec=spec, key=name, run_dir=str(tmp_path), launch=outcome, steps=[])

    meant_to_fail = next(n for n in CATALOGUE.names(trains=False) if n in CATALOGUE.names(tiers=None))
    cache.guards.note_death_before_step1(*died(meant_to_fail))
    cache.guards.note_death_before_step1(*died("dense_native"))
    cache.guards.require_no_stack_fact(CATALOGUE.spec("schedule_and_clip", cache.tier))  # one death is no fact yet
    cache.guards.note_death_before_step1(*died("dense_native_kernel_rope", "RuntimeError: something else"))
    cache.guards.require_no_stack_fact(CATALOGUE.spec("schedule_and_clip", cache.tier))
    cache.guards.note_death_before_step1(*died("schedule_and_clip"))
    with pytest.raises(StackFactStops, match="not run: ValueError: When dp_mesh_dims is provided.*native path: "
                                              "it killed dense_native steps=10, .* before step 1"):
        cache.guards.require_no_stack_fact(CATALOGUE.spec("uninterrupted", cache.tier))
    assert cache.guards.not_launched[-1]["why"] == f"not run: {fact}"
    cache.guards.require_no_stack_fact(CATALOGUE.spec(meant_to_fail, cache.tier))  # a failure on purpose still runs
    backend = next(n for n in CATALOGUE.names(trains=True) if CATALOGUE.spec(n, cache.tier).path == "hf_backend")
    cache.guards.require_no_stack_fact(CATALOGUE.spec(backend, cache.tier))  # another path: not this fact's
