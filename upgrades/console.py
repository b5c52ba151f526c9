"""Where the upgrade check tells its progress: one line at a time on stderr, flushed (its
pages and JSON are its results; the terminal shows what it is doing)."""

from __future__ import annotations

import sys


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
