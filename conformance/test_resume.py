"""Resume contracts: a run resumed from a DCP checkpoint continues as if never interrupted.

Two runs of one launch line (``fixtures.runs.catalogue.uninterrupted``/``resumed``): 12 steps
from the tied checkpoint with a full checkpoint every 5 steps, and the same line restarted with
the step-5 and step-10 checkpoints in its checkpoint folder and no step named, which torchtitan
resumes from (its fault-tolerance path, ``components/checkpointer/dcp.py``: "checkpoint.folder
already contains valid checkpoints ... we resume from it"; ``load_step`` -1: "the latest
checkpoint"). The explicitly named step (``--checkpoint.load_step``) is the compat contract's
path (``test_compat.py``, resuming from the trusted stack's checkpoint). The expected value of each step after the resume is
the uninterrupted run's own step: a reference run of the same config, not the resumed run's
bookkeeping. Each piece of state a checkpoint must carry (CheckpointManager's ``states``:
model, optimizer, lr_scheduler, dataloader, train_state) is checked by name, from what the
probes saw inside both runs, so a failure says which one was lost. Anchor: torchtitan's
integration test of checkpoint resume (``tests/integration_tests``, "checkpoint" and
"checkpoint_load_step" runs), which checks only that the resumed run starts.
"""

from __future__ import annotations

import pytest

from fixtures.rank import probes
from fixtures.contract import expect, expect_close_series, expect_equal, fail, require_trained
from fixtures.runs.catalogue import RESUME_AT, RESUME_STEPS, resumed, uninterrupted

pytestmark = [pytest.mark.resume, pytest.mark.slow]

AFTER = list(range(RESUME_AT + 1, RESUME_STEPS + 1))  # the steps the resumed run trains


def _runs(titan_runs, tier):
    return require_trained(titan_runs.get(uninterrupted(tier))), require_trained(titan_runs.get(resumed(tier)))


def _by_step(records: list[dict], offset: int = 0) -> dict[int, list[dict]]:
    """Probe records grouped by the step they belong to (``offset`` added: a resumed run's
    probes count steps from its first step after the resume)."""
    out: dict[int, list[dict]] = {}
    for rec in records:
        out.setdefault(rec["step"] + offset, []).append(rec)
    return out


def _dataloader(whole, resumed_run, tier, record_property) -> None:
    """Each rank reads, at every step after the resume, the rows it read at that step of the
    uninterrupted run (sha256 of the input tokens of every microbatch)."""
    for rank in range(whole.world_size):
        expected = _by_step(whole.probe(probes.batches, rank))
        actual = _by_step(resumed_run.probe(probes.batches, rank), offset=RESUME_AT)
        for step in AFTER:
            want = [b["sha256"] for b in expected.get(step, [])]
            got = [b["sha256"] for b in actual.get(step, [])]
            if not want or got != want:
                seen_at = sorted(s for s, recs in expected.items() if [b["sha256"] for b in recs] == got)
                fail(f"dataloader: rank {rank} reads at step {step} of the resumed run what it read at "
                     f"step {step} uninterrupted",
                     [b["head"] for b in expected.get(step, [])], [b["head"] for b in actual.get(step, [])],
                     resumed_run,
                     detail=(f"the resumed run read the batch of uninterrupted step(s) {seen_at}: the "
                             "dataloader position was not restored" if seen_at else
                             "a batch the uninterrupted run never read") + f"; uninterrupted run: {whole.run_dir}")


def _lr_scheduler(whole, resumed_run, tier, record_property) -> None:
    """The learning rate of every step after the resume is the uninterrupted run's at that
    step (a restarted schedule would repeat its warmup from step 1)."""
    full = [rec["groups"][0]["lr"] for rec in whole.probe(probes.optimizer, 0)]
    actual = [rec["groups"][0]["lr"] for rec in resumed_run.probe(probes.optimizer, 0)]
    expected = full[RESUME_AT:RESUME_STEPS]
    restarted = full[:len(actual)] == actual and actual != expected
    expect_close_series(actual, expected, tier.numerics.resume_rtol,
                        f"lr_scheduler: the learning rates of steps {AFTER[0]}..{AFTER[-1]} continue the schedule",
                        resumed_run, record_property,
                        detail=("the schedule restarted from step 1 (lr_scheduler state lost)" if restarted else "")
                        + f"; uninterrupted run's rates: {full}")


def _optimizer(whole, resumed_run, tier, record_property) -> None:
    """The optimizer state the first resumed step starts from is the state the uninterrupted
    run's step 4 started from, on every rank: Adam's step count (torch keeps one per
    parameter) and the sums of ``exp_avg`` squared and ``exp_avg_sq`` over the rank's shards."""
    for rank in range(whole.world_size):
        expected = whole.probe(probes.optimizer, rank)[RESUME_AT]["state"]
        actual = resumed_run.probe(probes.optimizer, rank)[0]["state"]
        expect_equal(f"optimizer: rank {rank}'s Adam step count when the resumed run takes step {AFTER[0]}",
                     expected["adam_step"], actual["adam_step"], resumed_run,
                     detail="None: no optimizer state at all (the optimizer restarted from nothing)")
        for name in ("exp_avg_sumsq", "exp_avg_sq_sum"):
            expect_close_series([actual[name]], [expected[name]], tier.numerics.resume_rtol,
                                f"optimizer: rank {rank}'s {name} when the resumed run takes step {AFTER[0]}",
                                resumed_run, record_property, detail=f"uninterrupted run: {whole.run_dir}")


def _train_state(whole, resumed_run, tier, record_property) -> None:
    """The resumed run logs steps 11 and 12 (torchtitan's train_state carries the step)."""
    expect_equal("train_state: the resumed run continues the step count", AFTER,
                 [s.step for s in resumed_run.steps], resumed_run)


def _model(whole, resumed_run, tier, record_property) -> None:
    """Loss and grad norm of every step after the resume are the uninterrupted run's (bit for
    bit on cpu): the model weights came back, with everything above."""
    expected = {s.step: s for s in whole.steps}
    for metric in ("loss", "grad_norm"):
        expect_close_series([getattr(s, metric) for s in resumed_run.steps],
                            [getattr(expected[s], metric) for s in AFTER if s in expected],
                            tier.numerics.resume_rtol,
                            f"model: the {metric} of steps {AFTER[0]}..{AFTER[-1]} after the resume",
                            resumed_run, record_property, detail=f"uninterrupted run: {whole.run_dir}")


STATES = {"dataloader": _dataloader, "lr_scheduler": _lr_scheduler, "optimizer": _optimizer,
          "train_state": _train_state, "model": _model}


@pytest.mark.parametrize("state", list(STATES))
def test_resume_restores(tier, titan_runs, record_property, state):
    """A run resumed from the step-10 DCP checkpoint of a 12-step run restores ``state``:
    ``dataloader`` (the same rows at steps 11 and 12), ``lr_scheduler`` (the same learning
    rates), ``optimizer`` (the same Adam state entering step 11), ``train_state`` (steps
    numbered 11 and 12), ``model`` (the same loss and grad norm at steps 11 and 12, within the
    tier's ``resume_rtol``: bit for bit on cpu)."""
    whole, resumed_run = _runs(titan_runs, tier)
    STATES[state](whole, resumed_run, tier, record_property)


def test_restart_resumes_from_the_latest_checkpoint_it_finds(tier, titan_runs):
    """Restarted with checkpoints of steps 5 and 10 in its folder and no step named (torchtitan's
    default ``load_step`` -1, documented as "the latest checkpoint"), the run takes step 11
    first: it found step 10, the highest step number, not the last name in lexical order
    ("step-5") nor the first it listed. The expected step is the folder's content, which the
    suite seeded (``RunSpec.resume_also``), not anything the run reports about itself."""
    whole, resumed_run = _runs(titan_runs, tier)
    seeded = sorted((*resumed_run.spec.resume_also, resumed_run.spec.resume_step))
    expect(len(seeded) > 1 and len({len(str(s)) for s in seeded}) > 1,
           "the folder holds checkpoints whose step numbers have different digit counts",
           "at least two, of different lengths", seeded, resumed_run)
    first = resumed_run.steps[0].step if resumed_run.steps else None
    taken_from = None if first is None else first - 1
    expect_equal(f"the restarted run resumes from the latest of the checkpoints of steps {seeded} in its folder "
                 "(first step it takes, minus one)", max(seeded), taken_from, resumed_run,
                 detail=("it resumed from the lexically last folder name (step-5 > step-10)"
                         if taken_from == max(seeded, key=lambda s: f"step-{s}") else
                         "it resumed from none of them" if taken_from not in seeded else "")
                 + f"; uninterrupted run (the checkpoints' source): {whole.run_dir}")
