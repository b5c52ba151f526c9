"""Run by meta_tests/test_sessions.py: a real run whose rank 1 aborts at interpreter exit
after training. The contract reading the run passes; the clean-exit contract fails, naming
the rank and the signal."""
from pathlib import Path

from fixtures.contract import expect_clean_exit, expect_equal, require_trained
from fixtures.repo import REPO_ROOT
from fixtures.runs.catalogue import CATALOGUE, Entry
from fixtures.runs.spec import RunSpec

SITE = Path(__file__).resolve().parent / "abort_at_exit"
ABORTING = RunSpec(config="dense_native", steps=2, env=(
    ("PYTHONPATH", f"{SITE}:{REPO_ROOT}"), ("CONFORMANCE_ABORT_AT_EXIT_RANK", "1")))

CATALOGUE.add(Entry("meta_aborting_at_exit", lambda tier: ABORTING, trains=False,
                   why="rank 1 aborts at interpreter exit on purpose"))


def test_reads_the_run(tier, titan_runs):
    run = require_trained(titan_runs.get(ABORTING))
    expect_equal("the run recorded its two steps", 2, len(run.steps), run)


def test_clean_exit(tier, titan_runs):
    expect_clean_exit(titan_runs.get(ABORTING))
