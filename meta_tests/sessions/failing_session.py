"""Run by meta_tests/test_sessions.py with planted secrets in the environment: a failing
contract on a real run, whose message even quotes a secret."""
import os

from fixtures.contract import expect_equal
from fixtures.runs.catalogue import DENSE_NATIVE


def test_fails_on_a_run(tier, titan_runs):
    run = titan_runs.get(DENSE_NATIVE)
    expect_equal("a deliberately impossible step count", -1, len(run.steps), run,
                 detail=f"token in the message: {os.environ.get('HF_TOKEN')}")
