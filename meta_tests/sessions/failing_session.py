"""Run by meta_tests/test_sessions.py with planted secrets in the environment: a failing
contract on a real run, whose message even quotes a secret."""
import os

from fixtures.contract import expect_equal
from fixtures.run_definitions import DENSE_NATIVE


def test_fails_on_a_run(platform, titan_runs):
    run = titan_runs.get(DENSE_NATIVE)
    expect_equal(len(run.steps), -1, "a deliberately impossible step count", run,
                 detail=f"token in the message: {os.environ.get('HF_TOKEN')}")
