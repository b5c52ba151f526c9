"""Run by meta_tests/test_sessions.py: two tests that need the same training run."""
from fixtures.runs import RunSpec

SHARED = RunSpec(config="dense_native", steps=1)


def test_first_reader(platform, titan_runs):
    assert titan_runs.get(SHARED).ok


def test_second_reader(platform, titan_runs):
    assert titan_runs.get(SHARED).ok
