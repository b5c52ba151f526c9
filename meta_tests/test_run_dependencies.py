"""What the run cache gives a run beyond its spec: a clipping threshold taken from another
run's result, and a bounded cost for runs that only known deviations ask for.

The launch itself is replaced by a recorder (``RunCache._launch``): these tests are about
what the cache asks of a launch and which results it serves, not about torchrun.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fixtures.launch import launcher
from fixtures.runs.cache import RunCache
from fixtures.data.assets import Assets
from fixtures.runs.inputs import RunInputs
from fixtures.runs.catalogue import DENSE_NATIVE, SCHEDULE_AND_CLIP, Catalogue, Entry
from fixtures.runs.result import RunResult, StepMetrics
from fixtures.runs.spec import RunSpec
from fixtures.tiers.tier_profile import Timeouts, cpu_profile

pytestmark = pytest.mark.meta


class RecordingCache(RunCache):
    """A run cache whose launches are recorded and answered with ``outcomes`` (in order)."""

    def __init__(self, root: Path, tier, entries, outcomes):
        super().__init__(root, RunInputs(tier, Assets(root), root), runs=Catalogue(entries))
        self.launches: list[dict] = []
        self.outcomes = list(outcomes)

        self.guards.require_stack_preflight = lambda spec: None  # no probe subprocess: nothing is launched

    def _launch(self, run, key, run_dir, why="", first_step_by=None):
        spec = run.spec
        self.launches.append({"spec": spec, "launched": run.launched, "first_step_by": first_step_by,
                              "why": why})
        run_dir.mkdir(parents=True, exist_ok=True)
        stopped, norms = self.outcomes.pop(0)
        outcome = launcher.LaunchOutcome(argv=["torchrun"], env_added={}, returncode=None if stopped else 0,
                                         timed_out=bool(stopped), wall_s=1.0, console_log=run_dir / "c.log",
                                         stopped=stopped)
        steps = [StepMetrics(step=i + 1, loss=1.0, max_loss=1.0, grad_norm=n, memory_gib=0.0, step_time_s=0.1,
                             tokens_per_s=1.0) for i, n in enumerate(norms)]
        return RunResult(spec=spec, key=key, run_dir=str(run_dir), launch=outcome, steps=steps)


def test_the_clipping_threshold_is_the_median_of_the_unclipped_runs_norms(tmp_path):
    """``SCHEDULE_AND_CLIP`` launches with ``--training.max_norm`` at the median of
    ``DENSE_NATIVE``'s gradient norms (run first), whatever their scale: a 4B model's norms are
    not a tiny model's. The run keeps the spec that names its source."""
    norms = [40.0, 31.0, 25.0, 22.0, 20.0, 18.0, 17.0, 16.5, 16.0, 15.0]
    cache = RecordingCache(tmp_path, cpu_profile(), [Entry("dense_native", lambda t: DENSE_NATIVE),
                                                     Entry("schedule_and_clip", lambda t: SCHEDULE_AND_CLIP)],
                           [(None, norms), (None, norms)])
    result = cache.get(SCHEDULE_AND_CLIP)
    reference, clipped = cache.launches
    assert reference["spec"] == DENSE_NATIVE
    assert clipped["launched"].arg_value("--training.max_norm") == "19"  # (20 + 18) / 2
    assert result.spec == SCHEDULE_AND_CLIP and "max_norm=median grad norm of (dense_native" in result.spec.describe()
    assert RunSpec.from_json(result.spec.to_json()) == SCHEDULE_AND_CLIP


def test_no_threshold_from_a_run_that_recorded_no_norm(tmp_path):
    cache = RecordingCache(tmp_path, cpu_profile(), [Entry("dense_native", lambda t: DENSE_NATIVE),
                                                     Entry("schedule_and_clip", lambda t: SCHEDULE_AND_CLIP)],
                           [("died", [])])
    with pytest.raises(ValueError, match="median of the gradient norms of dense_native steps=10, which recorded none"):
        cache.get(SCHEDULE_AND_CLIP)


def test_an_expected_failure_has_a_bounded_cost_and_serves_only_expected_failures(tmp_path):
    """A run asked for by a known deviation (strict xfail) is stopped if no step finished
    within the first step's allowance (startup + compile + one step, not the whole run's);
    that stopped result is reused for other known deviations, and any other contract
    relaunches the run with its full allowance."""
    tier = dataclasses.replace(cpu_profile(), timeouts=Timeouts(startup_s=100.0, compile_s=1000.0, step_s=50.0))
    spec = RunSpec(config="dense_native", steps=10)
    cap = "the expected-failure cap: no step finished in 1150 s"
    cache = RecordingCache(tmp_path, tier, [Entry("one", lambda t: spec)], [(cap, []), (None, [1.0] * 10)])
    first = cache.get(spec, expected_to_fail=True)
    assert cache.launches[0]["first_step_by"] == 1150.0 < tier.timeouts.for_steps(10)
    assert first.launch.stopped == cap and not first.trained
    assert cache.get(spec, expected_to_fail=True).launch.stopped == cap and len(cache.launches) == 1
    full = cache.get(spec)
    assert len(cache.launches) == 2 and cache.launches[1]["first_step_by"] is None
    assert "stopped at the expected-failure cap" in cache.launches[1]["why"]
    assert full.ok and cache.get(spec, expected_to_fail=True).ok and len(cache.launches) == 2


def test_each_way_a_run_needs_another_is_one_kind_of_the_relation(tmp_path):
    """``needs.needs_of`` lists, from the spec and the session's inputs alone, every run a
    catalogue run needs: the pretraining run behind 'pretrained', the uninterrupted run behind
    a resume and behind the trusted resume source, the unclipped run behind a clipping
    threshold; a run that needs nothing lists nothing."""
    from fixtures.runs import catalogue as c
    from fixtures.runs.needs import Need, NeedKind, input_need, needs_of
    from fixtures.runs.spec import Checkpoint, ResumeSource

    tier = cpu_profile()
    inputs = RunInputs(tier, Assets(tmp_path), tmp_path)

    def kinds(spec):
        return [(n.kind, n.run) for n in needs_of(spec, inputs)]

    assert kinds(c.LOAD_PRETRAINED) == [(NeedKind.CHECKPOINT, c.PRETRAIN)]
    assert kinds(c.resumed(tier)) == [(NeedKind.RESUMES, c.uninterrupted(tier))]
    assert kinds(c.resumed_from_trusted(tier)) == [(NeedKind.RESUME_CHECKPOINT, c.uninterrupted(tier))]
    assert kinds(c.SCHEDULE_AND_CLIP) == [(NeedKind.CLIPPING_THRESHOLD, DENSE_NATIVE)]
    assert kinds(c.LOAD_TRUSTED_LR0_EXPORT) == [(NeedKind.CHECKPOINT, c.LOAD_TIED_TRAIN_EXPORT)]
    assert kinds(DENSE_NATIVE) == [] and kinds(c.LOAD_TIED_TRAIN_EXPORT) == []
    assert needs_of(dataclasses.replace(DENSE_NATIVE, load=Checkpoint.HF_TIED), inputs) == []
    # an input asked for alone (a contract's checkpoint folder) is needed as what it is
    assert input_need(ResumeSource.TRUSTED, inputs) == Need(NeedKind.RESUME_CHECKPOINT, c.uninterrupted(tier))
    assert input_need(Checkpoint.PRETRAINED, inputs) == Need(NeedKind.CHECKPOINT, c.PRETRAIN)


def test_a_run_the_catalogue_lacks_is_refused_before_any_run_it_needs_is_launched(tmp_path):
    """``check`` refuses what needs no input (here: a run not in the catalogue) before it
    resolves any input: the 200-step pretraining run behind 'pretrained' is not launched for
    a run that would be refused anyway (before, ``check`` resolved the inputs first)."""
    from fixtures.runs.cache import NotInCatalogue
    from fixtures.runs.catalogue import LOAD_PRETRAINED, PRETRAIN

    stray = dataclasses.replace(LOAD_PRETRAINED, steps=2)
    cache = RecordingCache(tmp_path, cpu_profile(), [Entry("pretrain", lambda t: PRETRAIN),
                                                     Entry("load_pretrained", lambda t: LOAD_PRETRAINED)],
                           [(None, [1.0] * 200)])
    with pytest.raises(NotInCatalogue, match="load=pretrained"):
        cache.get(stray)
    assert cache.launches == []


def test_a_resumed_run_gets_the_run_it_resumes_once_and_seeds_its_folder_from_it(tmp_path, monkeypatch):
    """The run a resume needs is got once per request (``RunCache.resolve``), launched first,
    and handed to the launch as the result it resumes from; a second request reuses both."""
    from fixtures.runs import catalogue as c

    tier = cpu_profile()
    seen = []
    monkeypatch.setattr("fixtures.runs.cache.checkpoints.validate_hf_dir", lambda *a, **k: {})  # no assets built
    cache = RecordingCache(tmp_path, tier, [Entry("uninterrupted", c.uninterrupted), Entry("resumed", c.resumed)],
                           [(None, [1.0] * c.RESUME_STEPS), (None, [1.0] * (c.RESUME_STEPS - c.RESUME_AT))])
    real_launch = cache._launch

    def launch(run, key, run_dir, why="", first_step_by=None):
        seen.append(run.resumes.spec if run.resumes is not None else None)
        return real_launch(run, key, run_dir, why, first_step_by)

    cache._launch = launch
    cache.get(c.resumed(tier))
    cache.get(c.resumed(tier))
    assert [launched["spec"] for launched in cache.launches] == [c.uninterrupted(tier), c.resumed(tier)]
    assert seen == [None, c.uninterrupted(tier)]
    assert cache.launches[0]["why"] == ("not in the run cache, for the resume of "
                                        f"{cache.catalogue.launch_of(c.resumed(tier), tier).describe()}")
