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

    def require_stack_preflight(self, spec):  # no probe subprocess: nothing is launched
        return None

    def _launch(self, spec, key, run_dir, why="", folders=None, source=None, launched=None, first_step_by=None):
        self.launches.append({"spec": spec, "launched": launched or spec, "first_step_by": first_step_by,
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
