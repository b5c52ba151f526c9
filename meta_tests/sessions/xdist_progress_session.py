"""Run by meta_tests/test_sessions.py with ``-n 2``: each test, on its xdist worker, emits a
progress line and then waits until the outer test says (a file) that it saw that line on the
controller's output. Only a relay that shows lines while tests run lets this session pass;
lines shown at the end of a test, or of the session, leave both tests waiting in vain."""

import os
import time
from pathlib import Path

import pytest

from fixtures.launch import progress


@pytest.mark.parametrize("name", ["first", "second"])
def test_progress_shows_while_the_test_runs(name):
    ack = Path(os.environ["CONFORMANCE_META_ACK"]) / name
    progress.emit(f"relay probe {name}: waiting for the controller to show this line")
    deadline = time.monotonic() + 60
    while not ack.exists():
        assert time.monotonic() < deadline, \
            f"relay probe {name}: no acknowledgement in 60 s; the line was not shown live"
        time.sleep(0.2)
