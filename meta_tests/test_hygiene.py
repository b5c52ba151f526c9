"""Pruning old output keeps what it should."""

from __future__ import annotations

import os
import time

import pytest

from fixtures.session import hygiene

pytestmark = pytest.mark.meta


def test_prune_reports_keeps_newest_and_current(tmp_path):
    folders = []
    for i in range(5):
        d = tmp_path / f"s{i}"
        d.mkdir()
        (d / "report.json").write_text("{}")
        os.utime(d, (time.time() - (5 - i) * 100,) * 2)
        folders.append(d)
    removed = hygiene.prune_reports(tmp_path, keep=2, current=folders[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s0", "s3", "s4"]
    assert sorted(p.name for p in removed) == ["s1", "s2"]


def test_prune_runs_drops_only_old_results(tmp_path):
    old, new, unfinished = (tmp_path / n for n in ("old", "new", "unfinished"))
    for d in (old, new, unfinished):
        d.mkdir()
    for d in (old, new):
        (d / "result.json").write_text("{}")
    os.utime(old / "result.json", (time.time() - 10 * 86400,) * 2)
    removed = hygiene.prune_runs(tmp_path, max_age_days=7)
    assert removed == [old] and new.exists() and unfinished.exists() and not old.exists()
