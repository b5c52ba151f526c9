"""Records where the Python processes of one meta-test session write (loaded through
``PYTHONPATH`` by ``meta_tests/test_sessions.py``, and only there).

The check "a session writes nothing outside its report and cache folders" used to compare
``git status`` before and after the session; with ``pytest -n 2`` (scripts/selftest.sh) another
worker's session, or the venv build running beside the meta tests, writes into the checkout
too, and those files were counted as this session's. Here every process of the session (the
pytest process, torchrun's agent, each rank: ``PYTHONPATH`` reaches them all, as
``fixtures.runs.plan.rank_environment`` keeps it) appends each path it opens for writing,
creates, renames to or links under the watched roots to the log. The events are CPython's
audit events (https://docs.python.org/3/library/audit_events.html): ``open`` (path, mode,
flags; builtins.open, io.open, os.open), ``os.mkdir``, ``os.rename`` (also os.replace),
``os.link`` and ``os.symlink``. A non-Python writer (a compiler the session starts) is not
seen; the suite writes through Python alone.

Active only when ``CONFORMANCE_META_WRITE_LOG`` names the log file and
``CONFORMANCE_META_WRITE_ROOTS`` the folders to watch (``os.pathsep``-separated).
"""

import os
import sys

_LOG = os.environ.get("CONFORMANCE_META_WRITE_LOG")
_ROOTS = tuple(os.path.join(os.path.realpath(r), "")
               for r in os.environ.get("CONFORMANCE_META_WRITE_ROOTS", "").split(os.pathsep) if r)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _watched(path) -> str | None:
    if isinstance(path, int):
        return None  # an open file descriptor: its path was recorded when it was opened
    try:
        full = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None
    return full if full.startswith(_ROOTS) or os.path.join(full, "") in _ROOTS else None


def _targets(event: str, args: tuple) -> tuple:
    if event == "open":
        path, _mode, flags = args
        return (path,) if isinstance(flags, int) and flags & _WRITE_FLAGS else ()
    if event == "os.mkdir":
        return (args[0],)
    if event in ("os.rename", "os.link", "os.symlink"):
        return (args[1],)
    return ()


def _install(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def hook(event: str, args: tuple) -> None:
        for target in _targets(event, args):
            path = _watched(target)
            if path is not None:
                os.write(fd, f"{os.getpid()} {event} {path}\n".encode())

    sys.addaudithook(hook)


if _LOG and _ROOTS:
    _install(_LOG)
