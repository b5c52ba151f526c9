"""A fresh run cache for one benchmark session, reusing the suite's built assets (a benchmark
is about launches, not about building the tiny checkpoints and dataset again)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402


@contextlib.contextmanager
def fresh_run_cache(prefix: str):
    """(a temporary folder, the ``--conformance-cache`` folder in it), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=REPO / ".cache") as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        shared_assets = REPO / ".cache" / "conformance" / "assets"
        if shared_assets.exists():
            os.symlink(shared_assets, cache / "assets")
        yield Path(tmp), cache
