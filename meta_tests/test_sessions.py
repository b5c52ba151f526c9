"""Whole pytest sessions under stress: interrupted, concurrent, leaking, holding secrets.

Each test runs real pytest processes on the files in ``sessions/`` with their own cache and
report folders, and checks what a user would: exit codes, the report, the process table,
the files written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fixtures.repo import SESSION_ENV
from fixtures.session.hygiene import orphans
from reports.session_report import SessionReport

pytestmark = [pytest.mark.meta, pytest.mark.slow]

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
SESSIONS = Path(__file__).resolve().parent / "sessions"
FAKE_HF_TOKEN = "hf_plantedFAKEtoken0123456789"
FAKE_AWS_SECRET = "plantedFAKEawsSecretKey/0123456789"


def _session_env(session: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in (SESSION_ENV, "CONFORMANCE_REPORT_DIR", "PYTEST_XDIST_WORKER")}
    env[SESSION_ENV] = session
    env.update(extra)
    return env


def _pytest_argv(file: str, report: Path, cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", str(SESSIONS / file), "-q", "-p", "no:randomly",
            "--report-dir", str(report), "--conformance-cache", str(cache), *extra]


def _wait_for_launch(session: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if orphans(session):
            return
        time.sleep(0.5)
    raise AssertionError("the inner session never started its launch")


def _as_from_a_terminal() -> None:
    """In the inner session, before exec: SIGINT at its default, as in a shell's foreground
    job, so Python turns it into KeyboardInterrupt. A shell without job control starts
    background jobs (``cmd &``) with SIGINT ignored and the ignore is inherited through exec;
    a selftest started that way made the SIGINT case wait for the hanging launch's own
    timeout (seen: the inner session printed its first test's dot, then nothing for 90 s)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_session_leaves_partial_report_and_no_process(tmp_path, sig):
    """Ctrl-C (SIGINT) or SIGTERM in the middle of a launch: the session stops, says it is
    interrupted, leaves a partial report with what finished and no process running."""
    session = f"meta-int-{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report"
    proc = subprocess.Popen(_pytest_argv("interrupt_session.py", report, tmp_path / "cache"),
                            cwd=REPO, env=_session_env(session), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_as_from_a_terminal)
    try:
        _wait_for_launch(session)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(1.0)  # the agent gets SIGTERM when its pytest dies (PR_SET_PDEATHSIG)
            for pid in orphans(session):  # and whatever is left is not left running
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert orphans(session) == [], "processes of the interrupted session survived"
    data = SessionReport.load(report)
    assert data.complete is False
    outcomes = {nodeid.rsplit("::", 1)[1]: outcome for nodeid, outcome in data.outcomes.items()}
    assert outcomes.get("test_finishes_first") == "passed", outcomes
    assert "INCOMPLETE" in (report / "summary.md").read_text()


def _launch_lines(cache: Path) -> list[dict]:
    path = cache / "runs" / "launches.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def test_xdist_workers_share_one_launch(tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.run(_pytest_argv("shared_run_session.py", tmp_path / "report", cache,
                                       "-m", "cpu", "-n", "2"),
                          cwd=REPO, env=_session_env(f"meta-xdist-{uuid.uuid4().hex[:8]}"),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout
    assert len(_launch_lines(cache)) == 1, _launch_lines(cache)


def test_concurrent_sessions_share_one_launch(tmp_path):
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(_pytest_argv("shared_run_session.py", tmp_path / f"report{i}", cache, "-m", "cpu"),
                         cwd=REPO, env=_session_env(f"meta-conc{i}-{uuid.uuid4().hex[:8]}"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    assert len(_launch_lines(cache)) == 1, _launch_lines(cache)
    # Both sessions read the same, complete result.
    keys = {SessionReport.load(r).runs[0].key for r in tmp_path.glob("report*/report.json")}
    assert len(keys) == 1


def test_session_with_orphan_fails_and_kills_it(tmp_path):
    session = f"meta-orphan-{uuid.uuid4().hex[:8]}"
    proc = subprocess.run(_pytest_argv("orphan_session.py", tmp_path / "report", tmp_path / "cache", "-s"),
                          cwd=REPO, env=_session_env(session), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout[-3000:]
    assert "still running at its end and were killed" in proc.stdout
    pid = int(proc.stdout.split("ORPHAN_PID=", 1)[1].split()[0])
    time.sleep(0.5)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert orphans(session) == []


def test_a_session_inside_another_stops_its_own_leftovers_only(tmp_path):
    """A pytest session started inside another (a meta test's inner session, each session of
    an upgrade check) inherits the outer session's id. At its end it kills the launches it
    left, and no launch of the outer session: here a tagged process stands for another xdist
    worker's torchrun, alive through the inner session. Seen at 97fc280 under ``-n 2``: an
    inner session's end SIGKILLed the other worker's runs ("torchrun exited -9 without naming
    a failed rank"; a killed-rank launch whose torchrun named no rank)."""
    session = f"meta-nested-{uuid.uuid4().hex[:8]}"
    outer = subprocess.Popen(["sleep", "300"], env=_session_env(session, CONFORMANCE_LAUNCH_ID="outer-launch"),
                             start_new_session=True)
    try:
        proc = subprocess.run(_pytest_argv("orphan_session.py", tmp_path / "report", tmp_path / "cache", "-s"),
                              cwd=REPO, env=_session_env(session), capture_output=True, text=True, timeout=120)
        time.sleep(0.5)
        outer_alive = outer.poll() is None
    finally:
        outer.kill()
        outer.wait()
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout[-3000:]
    own = int(proc.stdout.split("ORPHAN_PID=", 1)[1].split()[0])
    assert f"were killed: pids [{own}]" in proc.stdout, proc.stdout[-3000:]
    assert outer_alive, f"the inner session's end killed the outer session's launch (pid {outer.pid})"


WRITE_AUDIT = Path(__file__).resolve().parent / "write_audit"


def _audited_env(env: dict[str, str], log: Path, *roots: Path) -> dict[str, str]:
    """``env`` with every Python process of the session recording where under ``roots`` it
    writes (``write_audit/sitecustomize.py``): attributable to this session alone, where a
    ``git status`` before and after also counts what a concurrent session writes."""
    return {**env, "CONFORMANCE_META_WRITE_LOG": str(log),
            "CONFORMANCE_META_WRITE_ROOTS": os.pathsep.join(str(r) for r in roots),
            "PYTHONPATH": os.pathsep.join(p for p in (str(WRITE_AUDIT), env.get("PYTHONPATH", "")) if p)}


def _writes(log: Path) -> list[tuple[int, str, Path]]:
    """(pid, audit event, path) per write the audited session made under its roots."""
    rows = (line.split(" ", 2) for line in log.read_text().splitlines()) if log.exists() else ()
    return [(int(pid), event, Path(path)) for pid, event, path in rows]


def test_secrets_never_reach_report_and_nothing_written_elsewhere(tmp_path):
    """A failing contract on a real run, with a fake HF token and AWS secret in the
    environment (and even in the failure message): no file the session writes contains
    either value; the repro bundle keeps the names, redacted. The session writes nothing
    outside its report and cache folders."""
    report, cache = tmp_path / "report", tmp_path / "cache"
    # a reused report folder: the previous session's run record and bundle must not leak in
    (report / "runs").mkdir(parents=True)
    (report / "runs" / "stale.json").write_text(json.dumps({"key": "stale", "description": "old"}))
    (report / "repro" / "old_bundle").mkdir(parents=True)
    log = tmp_path / "writes.log"
    proc = subprocess.run(
        _pytest_argv("failing_session.py", report, cache, "-m", "cpu",
                     "-o", f"cache_dir={cache / 'pytest'}"), cwd=REPO,
        env=_audited_env(_session_env(f"meta-secret-{uuid.uuid4().hex[:8]}", HF_TOKEN=FAKE_HF_TOKEN,
                                      AWS_SECRET_ACCESS_KEY=FAKE_AWS_SECRET),
                         log, REPO, tmp_path),
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout[-3000:]
    # live progress shows in -q output: the launch, each step's loss, the end
    assert re.search(r"conformance: launching dense_native steps=10 .*\(2 ranks on 1 node\(s\)", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"conformance:   dense_native step 10/10 loss \d+\.\d{4}", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"conformance: done dense_native steps=10[^:\n]*: [\d.]+ s, launched, exit 0", proc.stdout), proc.stdout[-3000:]
    written = [p for p in report.rglob("*") if p.is_file()]
    assert written, "the session wrote no report"
    for path in written:
        data = path.read_bytes()
        assert FAKE_HF_TOKEN.encode() not in data, f"HF token leaked into {path}"
        assert FAKE_AWS_SECRET.encode() not in data, f"AWS secret leaked into {path}"
    assert not (report / "runs" / "stale.json").exists()
    assert "stale" not in {r.key for r in SessionReport.load(report).runs}
    bundles = list((report / "repro").iterdir())
    assert len(bundles) == 1
    bundle = bundles[0]
    env = json.loads((bundle / "env.json").read_text())
    assert env["HF_TOKEN"] == env["AWS_SECRET_ACCESS_KEY"] == "<redacted>"
    for name in ("rerun.sh", "failure.txt", "inventory.json"):
        assert (bundle / name).exists(), name
    run_dirs = list((bundle / "runs").iterdir())
    assert len(run_dirs) == 1
    run_files = {p.name for p in run_dirs[0].iterdir()}
    assert {"command.sh", "resolved_config.json", "rank0.stderr.tail.log", "rank1.stderr.tail.log"} <= run_files, run_files
    assert "torchrun" in (run_dirs[0] / "command.sh").read_text()
    assert str(bundle) in proc.stdout, "the failure message names the bundle"
    writes = _writes(log)
    # the audit saw the session: the pytest process's report and a rank's files in the cache
    assert any(p.is_relative_to(report.resolve()) for _, _, p in writes), writes[:20]
    by_rank = {pid for pid, _, p in writes if p.is_relative_to(cache.resolve()) and ".rank" in p.name}
    assert by_rank, [str(p) for _, _, p in writes]
    ours = (report.resolve(), cache.resolve())
    elsewhere = sorted({f"{p} ({event}, pid {pid})" for pid, event, p in writes
                        if not any(p.is_relative_to(o) for o in ours) and "__pycache__" not in p.parts})
    assert elsewhere == [], f"the session wrote outside its report and cache folders: {elsewhere}"


def test_last_failed_reruns_only_the_failure(tmp_path):
    """``--lf`` works with the suite's configuration (no ``-p no:cacheprovider``): after a
    session with one failure, ``--lf`` reruns that test alone."""
    cache_dir = tmp_path / "pytest-cache"
    argv = _pytest_argv("last_failed_session.py", tmp_path / "report", tmp_path / "cache",
                        "-o", f"cache_dir={cache_dir}")
    first = subprocess.run(argv, cwd=REPO, env=_session_env(f"meta-lf-{uuid.uuid4().hex[:8]}"),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == pytest.ExitCode.TESTS_FAILED, first.stdout[-3000:]
    assert "1 failed, 1 passed" in first.stdout, first.stdout[-3000:]
    second = subprocess.run(argv + ["--lf"], cwd=REPO,
                            env=_session_env(f"meta-lf-{uuid.uuid4().hex[:8]}", CONFORMANCE_META_SECOND_RUN="1"),
                            capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:]
    # -q hides pytest's "run-last-failure" header; the deselection is --lf's doing
    assert "1 passed, 1 deselected" in second.stdout, second.stdout[-3000:]


def test_xdist_progress_is_shown_live_by_the_controller(tmp_path):
    """Under ``-n 2 -q``, a progress line a worker emits shows on the controller's output,
    prefixed with the worker's id, while its test still runs: each inner test waits for the
    acknowledgement this test writes only after reading the line from the session's stdout."""
    ack = tmp_path / "ack"
    ack.mkdir()
    proc = subprocess.Popen(
        _pytest_argv("xdist_progress_session.py", tmp_path / "report", tmp_path / "cache", "-n", "2"),
        cwd=REPO, env=_session_env(f"meta-relay-{uuid.uuid4().hex[:8]}", CONFORMANCE_META_ACK=str(ack)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen, lines = {}, []
    try:
        for line in proc.stdout:  # the inner tests give up after 60 s, so this ends
            lines.append(line)
            found = re.search(r"^\[(gw[01])\] conformance: relay probe (first|second): waiting", line)
            if found:
                seen[found.group(2)] = found.group(1)
                (ack / found.group(2)).touch()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = "".join(lines)
    assert set(seen) == {"first", "second"}, out[-3000:]
    assert proc.returncode == 0, out[-3000:]
    assert "2 passed" in out, out[-3000:]


def test_a_crash_at_exit_fails_only_the_clean_exit_contract(tmp_path):
    """A real run whose rank 1 trains every step, then dies by SIGABRT at interpreter exit
    (the teardown abort seen in CI, reproduced with an exit handler): the contract reading
    the run passes, the clean-exit contract fails naming rank 1, the signal and the threads
    the rank had when Python finished."""
    proc = subprocess.run(
        _pytest_argv("teardown_abort_session.py", tmp_path / "report", tmp_path / "cache", "-m", "cpu"),
        cwd=REPO, env=_session_env(f"meta-abort-{uuid.uuid4().hex[:8]}"),
        capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert "1 failed, 1 passed" in out, out[-3000:]
    assert "FAILED meta_tests/sessions/teardown_abort_session.py::test_clean_exit" in out, out[-3000:]
    assert "rank 1 trained every step and finished its Python program, then died at interpreter " \
           "exit (signal SIGABRT)" in out, out[-3000:]
    assert "MainThread" in out or "python" in out, out[-3000:]  # the OS threads at exit are listed


def test_a_killed_session_takes_its_launch_with_it(tmp_path):
    """SIGKILL to a pytest session in the middle of a launch (no finally, no hook runs): the
    torchrun agent, in a session of its own, gets SIGTERM from the kernel when its parent
    dies (PR_SET_PDEATHSIG) and stops its ranks; nothing of the launch is left running."""
    session = f"meta-kill-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(_pytest_argv("interrupt_session.py", tmp_path / "report", tmp_path / "cache"),
                            cwd=REPO, env=_session_env(session), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for_launch(session)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while orphans(session) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = orphans(session)
    finally:
        for pid in orphans(session):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes of the killed session's launch survived: {left}"
