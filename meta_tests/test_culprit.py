"""The culprit decision (``fixtures.launch.culprit``) on torchrun's failure report, with the
timings that fooled torchrun's "first observed failure": the victim's error file written
before the killed rank was seen, both in the same second, and the reverse. The real
programs are launched in ``test_launcher.py``; here every order of events is constructed,
so the answer cannot depend on timing luck."""

from __future__ import annotations

import json

import pytest

from fixtures.launch import culprit

pytestmark = pytest.mark.meta

PEER_ERROR = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
              "Connection closed by peer [127.0.0.1]:41623")


def _error_file(tmp_path, rank: int, message: str, mtime: float) -> str:
    import os

    path = tmp_path / f"error{rank}.json"
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\n  ...\n{message}\n",
        "timestamp": str(int(mtime))}}}))
    os.utime(path, (mtime, mtime))
    return str(path)


def _block(idx: int, rank: int, exitcode: int, error_file: str, signal_name: str = "") -> str:
    return (f"[{idx}]:\n  time      : 2026-11-30_12:00:00\n  host      : h\n"
            f"  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {exitcode} (pid: 10{rank}) {signal_name}\n"
            f"  error_file: {error_file}\n  traceback : see error file\n")


def _report(root: str, others: list[str]) -> str:
    rule = "-" * 40
    return ("=" * 40 + "\nrank FAILED\n" + rule + "\nFailures:\n" + "\n".join(others or ["  <NO_OTHER_FAILURES>"])
            + "\n" + rule + "\nRoot Cause (first observed failure):\n" + root + "=" * 40 + "\n")


@pytest.mark.parametrize("victim_written_before", [True, False], ids=["victim-first", "victim-later"])
def test_killed_rank_is_the_culprit_whatever_the_timestamps(tmp_path, victim_written_before):
    victim = _error_file(tmp_path, 0, PEER_ERROR, 1000.0 if victim_written_before else 1002.0)
    killed = _block(1, 1, -9, "<N/A>", "(SIGKILL)")
    # torchrun put the victim as root cause (its timestamp was the smallest)
    text = _report(_block(0, 0, 1, victim), [killed])
    failures = culprit.parse_failures(text)
    assert [f.rank for f in failures] == [0, 1]
    verdict = culprit.decide(failures, exit_order=[0, 1])  # even if rank 0 was seen gone first
    assert verdict.culprit.rank == 1 and verdict.culprit.signal == "SIGKILL"
    assert [f.rank for f in verdict.consequences] == [0]
    assert verdict.consequences[0].peer_failure
    assert "killed by SIGKILL" in verdict.reason


@pytest.mark.parametrize("same_second", [True, False])
def test_own_error_beats_an_earlier_peer_failure(tmp_path, same_second):
    victim = _error_file(tmp_path, 0, PEER_ERROR, 1000.0)
    cause = _error_file(tmp_path, 1, "RuntimeError: injected failure at step 3",
                        1000.0 if same_second else 1001.0)
    text = _report(_block(0, 0, 1, victim), [_block(1, 1, 1, cause)])
    verdict = culprit.decide(culprit.parse_failures(text), exit_order=[0, 1])
    assert verdict.culprit.rank == 1
    assert verdict.culprit.message == "RuntimeError: injected failure at step 3"
    assert "own error" in verdict.reason


def test_earliest_of_several_own_errors(tmp_path):
    first = _error_file(tmp_path, 3, "ValueError: bad shape", 1000.25)
    later = _error_file(tmp_path, 2, "KeyError: 'w'", 1000.75)
    text = _report(_block(0, 2, 1, later), [_block(1, 3, 1, first)])
    verdict = culprit.decide(culprit.parse_failures(text))
    assert verdict.culprit.rank == 3, verdict


def test_only_peer_failures_fall_back_to_the_earliest(tmp_path):
    a = _error_file(tmp_path, 0, PEER_ERROR, 1000.5)
    b = _error_file(tmp_path, 1, "torch.distributed.DistNetworkError: failed to recv, got 0 bytes", 1000.1)
    text = _report(_block(0, 0, 1, a), [_block(1, 1, 1, b)])
    verdict = culprit.decide(culprit.parse_failures(text))
    assert verdict.culprit.rank == 1 and "collective" in verdict.reason


def test_no_failure_report_no_verdict():
    assert culprit.parse_failures("all ranks finished\n") == []
    assert culprit.decide([]) is None


def test_a_victim_stopped_by_torchrun_is_not_the_culprit(tmp_path):
    """Seen on this machine: rank 0 wrote its peer failure, then torchrun's stop (SIGTERM)
    reached it while it was tearing down, so it is listed with -15 next to the SIGKILLed
    rank 1."""
    victim = _error_file(tmp_path, 0, PEER_ERROR, 1000.0)
    text = _report(_block(0, 1, -9, "<N/A>", "(SIGKILL)"), [_block(1, 0, -15, victim, "(SIGTERM)")])
    verdict = culprit.decide(culprit.parse_failures(text), exit_order=[0, 1])
    assert verdict.culprit.rank == 1 and verdict.culprit.signal == "SIGKILL"
    assert [f.rank for f in verdict.consequences] == [0]
    assert verdict.consequences[0].kind() == "peer/collective failure"


def test_a_bare_sigterm_is_torchruns_stop_not_an_error_of_its_own(tmp_path):
    """A rank with no error file that died of SIGTERM was stopped by torchrun: not killed,
    not an error of its own."""
    cause = _error_file(tmp_path, 1, "RuntimeError: injected failure at step 3", 1000.0)
    text = _report(_block(0, 1, 1, cause), [_block(1, 0, -15, "<N/A>", "(SIGTERM)")])
    verdict = culprit.decide(culprit.parse_failures(text))
    assert verdict.culprit.rank == 1
    (stopped,) = verdict.consequences
    assert stopped.stopped_by_torchrun and not stopped.killed and stopped.kind() is culprit.FailureKind.STOPPED


def test_a_rank_that_raised_then_got_sigterm_is_still_the_culprit(tmp_path):
    cause = _error_file(tmp_path, 1, "RuntimeError: injected failure at step 3", 1001.0)
    victim = _error_file(tmp_path, 0, PEER_ERROR, 1000.0)
    text = _report(_block(0, 0, 1, victim), [_block(1, 1, -15, cause, "(SIGTERM)")])
    verdict = culprit.decide(culprit.parse_failures(text))
    assert verdict.culprit.rank == 1
