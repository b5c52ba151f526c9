"""Run by meta_tests/test_sessions.py: a real run whose rank 1 aborts at interpreter exit
after training. The contract reading the run passes; the clean-exit contract fails, naming
the rank and the signal."""
from pathlib import Path

from fixtures.contract import expect_equal, require_trained
from fixtures.runs import REPO_ROOT, RunSpec

SITE = Path(__file__).resolve().parent / "abort_at_exit"
ABORTING = RunSpec(config="dense_native", steps=2, env=(
    ("PYTHONPATH", f"{SITE}:{REPO_ROOT}"), ("CONFORMANCE_ABORT_AT_EXIT_RANK", "1")))


def test_reads_the_run(platform, titan_runs):
    run = require_trained(titan_runs.get(ABORTING))
    expect_equal(len(run.steps), 2, "the run recorded its two steps", run)


def test_clean_exit(platform, titan_runs):
    from fixtures.contract import expect_clean_exit

    expect_clean_exit(titan_runs.get(ABORTING))
