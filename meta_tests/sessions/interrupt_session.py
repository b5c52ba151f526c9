"""Run by meta_tests/test_sessions.py, which interrupts it while the second test hangs."""
from pathlib import Path

from fixtures.launch import launcher
from fixtures.runs.plan import torchrun_argv

HANG = Path(__file__).resolve().parent.parent / "rank_programs" / "hang.py"


def test_finishes_first():
    assert True


def test_hangs_in_a_launch(tmp_path):
    argv = torchrun_argv(2, [str(HANG)], tmp_path / "logs")
    launcher.launch([argv], tmp_path, {}, 600, nproc_per_node=2)
