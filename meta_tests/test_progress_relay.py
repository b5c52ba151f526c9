"""The xdist progress relay (``fixtures.session.progress_relay``) on its own: what a worker appends
is shown once, prefixed with its worker id; a half-written line waits for its end; the last
lines are shown when the relay stops; a worker whose folder is gone logs instead of failing
its test. (That lines show while tests run is test_sessions.py's xdist test.)"""

from __future__ import annotations

import logging

import pytest

from fixtures.session.progress_relay import ProgressRelay, worker_sink

pytestmark = pytest.mark.meta


@pytest.fixture
def relay():
    shown: list[str] = []
    relay = ProgressRelay(shown.append)
    relay.shown = shown
    yield relay
    relay.stop()


def test_each_line_shown_once_with_its_worker(relay):
    gw0, gw1 = worker_sink(relay.folder, "gw0"), worker_sink(relay.folder, "gw1")
    gw0("conformance: launching a")
    gw1("conformance: launching b")
    assert relay.drain() == 2
    assert sorted(relay.shown) == ["[gw0] conformance: launching a", "[gw1] conformance: launching b"]
    assert relay.drain() == 0


def test_half_written_line_waits_for_its_end(relay):
    path = relay.folder / "gw3.log"
    path.write_text("conformance:   dense_native step 1/10")
    assert relay.drain() == 0
    with open(path, "a") as f:
        f.write(" loss 6.2514 (9 s)\n")
    relay.drain()
    assert relay.shown == ["[gw3] conformance:   dense_native step 1/10 loss 6.2514 (9 s)"]


def test_stop_shows_the_last_lines_and_removes_the_folder(relay):
    worker_sink(relay.folder, "gw0")("conformance: done a: 14.6 s, launched, exit 0")
    relay.stop()
    assert relay.shown == ["[gw0] conformance: done a: 14.6 s, launched, exit 0"]
    assert not relay.folder.exists()


def test_worker_without_its_folder_logs_instead_of_failing(relay, caplog):
    relay.stop()
    with caplog.at_level(logging.WARNING, logger="conformance.progress"):
        worker_sink(relay.folder, "gw0")("conformance: launching a")
    assert "conformance: launching a (not relayed:" in caplog.text
