"""Run by meta_tests/test_sessions.py: two tests that need the same training run."""
from fixtures.runs.catalogue import CATALOGUE, Entry
from fixtures.runs.spec import RunSpec

SHARED = RunSpec(config="dense_native", steps=1)
CATALOGUE.add(Entry("meta_shared_one_step", lambda tier: SHARED))


def test_first_reader(tier, titan_runs):
    assert titan_runs.get(SHARED).ok


def test_second_reader(tier, titan_runs):
    assert titan_runs.get(SHARED).ok
