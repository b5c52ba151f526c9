"""The launcher under real failures: a hung rank, a crashing rank, a killed rank.

Each test launches real torchrun agents with small rank programs (rank_programs/), so the
process supervision under test is torchrun's elastic agent plus the OS session.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fixtures import launcher

pytestmark = [pytest.mark.meta, pytest.mark.slow]

PROGRAMS = Path(__file__).parent / "rank_programs"


def _launch(tmp_path: Path, program: str, *args: str, timeout: float = 60.0):
    argv = launcher.torchrun_argv(2, [str(PROGRAMS / program), *args], tmp_path / "logs")
    return launcher.launch([argv], tmp_path, {}, timeout, nproc_per_node=2)


def test_clean_run_keeps_every_rank_log(tmp_path):
    outcome = _launch(tmp_path, "ok.py")
    assert outcome.ok, launcher.describe_failure(outcome)
    assert sorted(outcome.rank_logs) == [0, 1]
    for rank in (0, 1):
        text = Path(outcome.rank_logs[rank]["stdout"]).read_text()
        assert f"rank {rank} of 2" in text, text
    assert outcome.leftover_pids == []


def test_hung_rank_fails_within_timeout_and_leaves_nothing(tmp_path):
    timeout = 15.0
    start = time.monotonic()
    outcome = _launch(tmp_path, "hang.py", timeout=timeout)
    elapsed = time.monotonic() - start
    assert outcome.timed_out and not outcome.ok
    # The whole tree is gone: SIGABRT + SIGTERM grace periods bound the clean-up.
    assert outcome.leftover_pids == []
    assert elapsed < timeout + launcher.ABORT_GRACE_S + 2 * launcher.TERM_GRACE_S + 5, elapsed
    assert outcome.ranks_alive_at_timeout == [0, 1]
    # The hung rank is named by where it hangs: faulthandler's dump in its own log.
    rank1 = Path(outcome.rank_logs[1]["stderr"]).read_text()
    assert "hang.py" in rank1 and "line 11" in rank1, rank1[-2000:]
    message = launcher.describe_failure(outcome)
    assert "timed out; ranks still running at the timeout: [0, 1]" in message
    assert "--- rank 1 stderr" in message and "hang.py" in message


def test_raising_rank_is_named_with_its_traceback(tmp_path):
    outcome = _launch(tmp_path, "crash.py", "raise")
    assert not outcome.ok and not outcome.timed_out
    assert outcome.root_cause is not None, outcome.console_log.read_text()[-3000:]
    assert outcome.root_cause["rank"] == 1
    assert outcome.root_cause["exitcode"] == 1
    assert "injected failure at step 3" in outcome.root_cause["traceback"]
    assert outcome.leftover_pids == []
    assert "first failure: rank 1 (exit code 1)" in launcher.describe_failure(outcome)


def test_killed_rank_is_named_with_its_signal(tmp_path):
    outcome = _launch(tmp_path, "crash.py", "kill")
    assert not outcome.ok
    assert outcome.root_cause is not None
    assert outcome.root_cause["rank"] == 1
    assert outcome.root_cause["signal"] == "SIGKILL"
    assert outcome.leftover_pids == []
    assert "first failure: rank 1 (signal SIGKILL)" in launcher.describe_failure(outcome)
