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


# Added after mutation testing (benchmarks/mutation.md): each kills mutants the tests above let survive.


def _raw_block(idx: int, rank: int, local_rank: int, exitcode: int | None, error_file: str | None,
               traceback: str | None = "see error file", signal_name: str = "") -> str:
    """A block of torchrun's failure report with each field optional (``None``: line absent)."""
    lines = [f"[{idx}]:", "  time      : 2026-11-30_12:00:00", "  host      : h",
             f"  rank      : {rank} (local_rank: {local_rank})"]
    if exitcode is not None:
        lines.append(f"  exitcode  : {exitcode} (pid: 10{rank}) {signal_name}")
    if error_file is not None:
        lines.append(f"  error_file: {error_file}")
    if traceback is not None:
        lines.append(f"  traceback : {traceback}")
    return "\n".join(lines) + "\n"


def test_the_reason_names_the_rule_that_decided(tmp_path):
    """Each of the three rules gives its own sentence, word for word: killed by a signal; its
    own error (the only one, or the earliest of several); every rank a peer failure."""
    killed = culprit.decide(culprit.parse_failures(_report(
        _block(0, 0, 1, _error_file(tmp_path, 0, PEER_ERROR, 1000.0)), [_block(1, 1, -9, "<N/A>", "(SIGKILL)")])))
    assert killed.reason == ("rank 1 was killed by SIGKILL; a killed rank writes no error file, the others failed "
                             "after it")
    only = culprit.decide(culprit.parse_failures(_report(
        _block(0, 0, 1, _error_file(tmp_path, 0, PEER_ERROR, 1000.0)),
        [_block(1, 1, 1, _error_file(tmp_path, 1, "RuntimeError: injected", 1001.0))])))
    assert only.reason == ("rank 1 failed with its own error; the other ranks' errors are peer or collective "
                           "failures or torchrun's stop")
    several = culprit.decide(culprit.parse_failures(_report(
        _block(0, 2, 1, _error_file(tmp_path, 2, "KeyError: 'w'", 1000.75)),
        [_block(1, 3, 1, _error_file(tmp_path, 3, "ValueError: bad shape", 1000.25))])))
    assert several.reason == "rank 3 failed with its own error; it is the earliest of the ranks' own errors"
    peers = culprit.decide(culprit.parse_failures(_report(
        _block(0, 0, 1, _error_file(tmp_path, 0, PEER_ERROR, 1000.5)),
        [_block(1, 1, 1, _error_file(tmp_path, 1, PEER_ERROR, 1000.1))])))
    assert peers.reason == ("every rank failed in a collective, on a lost peer or by torchrun's stop; this one "
                            "first")


def test_the_order_ranks_were_seen_gone_breaks_a_tie_of_clocks():
    """Two ranks killed by signals wrote no error file (no clock to compare): the one the
    launcher saw gone first is the culprit; a rank it never saw gone comes after those it saw;
    with no observation, the lowest rank."""
    a = culprit.RankFailure(0, -9, "SIGKILL", "", "", None, None)
    b = culprit.RankFailure(1, -9, "SIGKILL", "", "", None, None)
    assert culprit.decide([a, b], exit_order=[1, 0]).culprit.rank == 1
    assert culprit.decide([a, b], exit_order=[1]).culprit.rank == 1
    assert culprit.decide([a, b]).culprit.rank == 0


def test_a_rank_with_no_error_file_is_read_from_torchruns_print(tmp_path):
    """A rank that exited 1 without an error file (``<N/A>``) failed with its own error: its
    message is the first printed line, its traceback torchrun's print (nothing of the report
    after it); a rank with an error file written earlier still comes first."""
    printed = "KeyError: 'w'\n    raised in step 3"
    text = _report(_block(0, 0, 1, _error_file(tmp_path, 0, "ValueError: bad shape", 1000.0)),
                   [_raw_block(1, 1, 1, 1, "<N/A>", printed)])
    failures = culprit.parse_failures(text)
    no_file = failures[1]
    assert no_file.error_file is None and no_file.written_at is None and no_file.signal is None
    assert no_file.message == "KeyError: 'w'" and no_file.traceback == printed
    assert no_file.own_error and no_file.kind() is culprit.FailureKind.OWN_ERROR
    verdict = culprit.decide(failures)
    assert verdict.culprit.rank == 0 and verdict.consequences == (no_file,)
    alone = culprit.decide(culprit.parse_failures(_report(
        _block(0, 0, 1, _error_file(tmp_path, 5, PEER_ERROR, 1000.0)), [_raw_block(1, 1, 1, 1, "<N/A>", printed)])))
    assert alone.culprit.rank == 1 and "own error" in alone.reason


def test_a_bare_sigterm_has_no_error_file_and_no_error_of_its_own():
    text = _report(_raw_block(0, 0, 0, -15, "<N/A>", signal_name="(SIGTERM)"), [])
    (stopped,) = culprit.parse_failures(text)
    assert stopped.error_file is None and stopped.stopped_by_torchrun and not stopped.own_error
    assert stopped.exitcode == -15 and stopped.how() == "signal SIGTERM"


def test_every_shape_of_error_file_is_read(tmp_path):
    """torchrun's error file: {"message": {"message", "extraInfo": {"py_callstack"}}} gives
    the message and the traceback (cut at 4000 characters); a plain string message, one without
    a message or extraInfo, a file that is no JSON or not UTF-8 give what they hold and leave
    the rest to torchrun's print, never the text "None"."""
    def read(name: str, content: bytes, printed: str = "printed line\nmore") -> culprit.RankFailure:
        path = tmp_path / name
        path.write_bytes(content)
        (failure,) = culprit.parse_failures(_report(_raw_block(0, 0, 0, 1, str(path), printed), []))
        return failure

    stack = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom\n"
    full = read("full.json", json.dumps({"message": {"message": "ValueError: boom",
                                                     "extraInfo": {"py_callstack": stack}}}).encode())
    assert (full.message, full.traceback) == ("ValueError: boom", stack)
    assert full.written_at == pytest.approx((tmp_path / "full.json").stat().st_mtime)
    long = read("long.json", json.dumps({"message": {"message": "E", "extraInfo": {"py_callstack": "x" * 5000}}}).encode())
    assert long.traceback == "x" * 4000
    plain = read("plain.json", json.dumps({"message": "RuntimeError: plain"}).encode())
    assert (plain.message, plain.traceback) == ("RuntimeError: plain", "printed line\nmore")
    no_extra = read("no_extra.json", json.dumps({"message": {"message": "OSError: x"}}).encode())
    assert (no_extra.message, no_extra.traceback) == ("OSError: x", "printed line\nmore")
    no_text = read("no_text.json", json.dumps({"message": {"extraInfo": {"py_callstack": stack}}}).encode())
    assert (no_text.message, no_text.traceback) == ("printed line", stack)
    empty = read("empty.json", b"{}")
    assert (empty.message, empty.traceback) == ("printed line", "printed line\nmore")
    assert empty.written_at is not None
    broken = read("broken.json", b'{"message": ')
    assert (broken.message, broken.traceback, broken.written_at) == ("printed line", "printed line\nmore", None)
    latin = read("latin.json", b'{"message": {"message": "ValueError: caf\xe9"}}')
    assert latin.message == "ValueError: caf\ufffd"


def test_the_report_parsed_is_torchruns_last_with_global_ranks(tmp_path):
    """Only the last "Failures:" report counts (an earlier restart's is history); ranks are
    global (rank 3 of local rank 1 on a second node); three failures are three; the exit code
    and a missing exit code or error file line are read as such; a block without a rank is
    skipped and the next still read; a print that mentions "traceback :" again is kept whole."""
    old = _report(_raw_block(0, 7, 7, 1, "<N/A>", "OldError: an earlier attempt"), [])
    new = _report(_raw_block(0, 3, 1, 1, "<N/A>", "RuntimeError: now"),
                  ["[1]:\n  time      : t\n  host      : h\n",
                   _raw_block(2, 4, 0, None, None, "ValueError: x traceback : y"),
                   _raw_block(3, 5, 1, -99, "<N/A>", "Z")])
    failures = culprit.parse_failures(old + "\nrestarting\n" + new)
    assert [f.rank for f in failures] == [3, 4, 5]
    three, four, five = failures
    assert three.exitcode == 1 and three.how() == "exit code 1" and three.message == "RuntimeError: now"
    assert four.exitcode is None and four.error_file is None and four.traceback == "ValueError: x traceback : y"
    assert five.signal == "signal 99" and five.how() == "signal signal 99"
    at_start = culprit.parse_failures("Failures:\n" + _raw_block(0, 2, 2, 1, "<N/A>", "E: at start"))
    assert [(f.rank, f.message) for f in at_start] == [(2, "E: at start")]


def test_an_exit_code_of_zero_is_no_signal():
    (zero,) = culprit.parse_failures(_report(_raw_block(0, 0, 0, 0, "<N/A>", "E: z"), []))
    assert zero.signal is None and zero.how() == "exit code 0"


def test_a_report_cut_before_its_root_cause_is_read_block_by_block():
    """Console output cut after the "Failures:" list (no rule, no root cause): each block's
    fields are its own (a line missing there is missing, never the next block's), and a block
    without a traceback line has no message."""
    text = "Failures:\n" + _raw_block(1, 1, 1, None, "<N/A>", "E: first") + _raw_block(2, 2, 2, 1, "<N/A>", None)
    first, second = culprit.parse_failures(text)
    assert (first.rank, first.exitcode, first.message, first.traceback) == (1, None, "E: first", "E: first")
    assert (second.rank, second.exitcode, second.message, second.traceback) == (2, 1, "", "")


def test_the_root_cause_is_the_verdicts_culprit_and_reads_back_from_its_record(tmp_path):
    """``LaunchOutcome.root_cause`` is a ``RootCause``: the culprit ``decide`` chose (with the
    rank torchrun named beside it), else torchrun's own "Root Cause" block; on disk the plain
    object ``to_dict`` writes, and a record written before the type (torchrun's block had no
    ``message`` key) reads back with every field."""
    victim = _error_file(tmp_path, 0, PEER_ERROR, 1000.0)
    text = _report(_block(0, 0, 1, victim), [_block(1, 1, -9, "<N/A>", "(SIGKILL)")])
    torchrun_first = culprit.torchrun_root_cause(text)
    assert (torchrun_first.rank, torchrun_first.exitcode, torchrun_first.signal) == (0, 1, None)
    cause = culprit.root_cause(culprit.decide(culprit.parse_failures(text)), torchrun_first)
    assert (cause.rank, cause.signal, cause.how(), cause.torchrun_first_observed) == (1, "SIGKILL", "signal SIGKILL", 0)
    assert culprit.RootCause.from_dict(json.loads(json.dumps(cause.to_dict()))) == cause
    assert culprit.root_cause(None, torchrun_first) is torchrun_first
    assert culprit.torchrun_root_cause("no report") is None and culprit.RootCause.from_dict(None) is None
    old = {"rank": 1, "exitcode": -6, "signal": "SIGABRT", "traceback": "", "reason": "torchrun's first observed failure",
           "torchrun_first_observed": 1}
    read = culprit.RootCause.from_dict(old)
    assert (read.rank, read.message, read.how()) == (1, None, "signal SIGABRT")
    assert read.to_dict() == {**old, "message": None, "node": None, "host": None}


# ----------------------------------------------------------------------------- added after mutation testing (round 3)

ROOT_CAUSE = "Root Cause (first observed failure):\n"


def test_torchruns_last_root_cause_block_is_read_field_by_field():
    """torchrun's last "Root Cause" block (an earlier attempt's report above it is not the one):
    the global rank (not the local one), the exit code and the signal it means, and the traceback
    after the block's first "traceback :" (the error's own text may hold those words)."""
    tb = "Traceback (most recent call last):\n  File x\nRuntimeError: peer traceback : lost"
    earlier = _report(_raw_block(0, 5, 1, 1, "<N/A>", "E: an earlier attempt"), [])
    last = _report(_raw_block(0, 3, 1, -9, "<N/A>", tb, "(SIGKILL)"), [])
    cause = culprit.torchrun_root_cause(earlier + last)
    assert cause.traceback.startswith(tb) and cause.traceback.endswith("=" * 40), cause.traceback
    assert cause == culprit.RootCause(rank=3, exitcode=-9, signal="SIGKILL", message=None, traceback=cause.traceback,
                                      reason="torchrun's first observed failure", torchrun_first_observed=3)
    assert cause.how() == "signal SIGKILL"


@pytest.mark.parametrize("exitcode, signal_name", [(-9, "SIGKILL"), (-6, "SIGABRT"), (1, None), (0, None),
                                                   (-200, None), (None, None)])
def test_only_a_signal_python_knows_is_named(exitcode, signal_name):
    """A negative exit code is named as the signal it is where Python knows that signal; a
    positive or zero one, an unknown number or a missing exitcode line leaves it unnamed, and
    the cause then says the exit code."""
    cause = culprit.torchrun_root_cause(ROOT_CAUSE + _raw_block(0, 2, 0, exitcode, "<N/A>", "E: x"))
    assert (cause.rank, cause.exitcode, cause.signal) == (2, exitcode, signal_name)
    assert cause.how() == (f"signal {signal_name}" if signal_name else f"exit code {exitcode}")


def test_a_root_cause_block_missing_lines_leaves_those_fields_empty():
    """A block at the very start of the text, without a rank line or a traceback line: no rank,
    no traceback, the exit code still read."""
    cause = culprit.torchrun_root_cause(ROOT_CAUSE + "[0]:\n  exitcode  : 1 (pid: 7)\n")
    assert (cause.rank, cause.exitcode, cause.traceback, cause.torchrun_first_observed) == (None, 1, "", None)


def test_the_root_cause_carries_every_field_of_the_culprit(tmp_path):
    """``root_cause`` keeps the culprit's rank, exit code, signal, message, traceback and the
    rule's reason, with the rank torchrun named beside it (None where torchrun named none)."""
    text = _report(_block(0, 0, 1, _error_file(tmp_path, 0, PEER_ERROR, 1000.0)),
                   [_block(1, 1, 1, _error_file(tmp_path, 1, "RuntimeError: injected", 1001.0))])
    verdict = culprit.decide(culprit.parse_failures(text))
    found = verdict.culprit
    assert found.exitcode == 1 and found.message == "RuntimeError: injected" and "injected" in found.traceback
    expected = culprit.RootCause(rank=1, exitcode=1, signal=None, message=found.message, traceback=found.traceback,
                                 reason=verdict.reason, torchrun_first_observed=0)
    assert culprit.root_cause(verdict, culprit.torchrun_root_cause(text)) == expected
    assert culprit.root_cause(verdict, None).torchrun_first_observed is None
