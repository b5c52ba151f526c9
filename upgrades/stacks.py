"""The CPU reference stacks this repository builds (``scripts/setup-venv.sh``): their venv and
constraints file, for the tools that work beside them (``upgrades``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402


@dataclass(frozen=True)
class Stack:
    name: str
    venv: Path
    constraints: Path


def _from_setup_script() -> dict[str, Stack]:
    """Read the stacks from setup-venv.sh's own table, so there is one list."""
    text = (REPO / "scripts" / "setup-venv.sh").read_text()
    found = re.findall(r"^\s*([\w.-]+)\)\s+venv=(\S+);\s+constraints=(\S+) ;;", text, flags=re.M)
    return {name: Stack(name, REPO / venv, REPO / constraints) for name, venv, constraints in found}


STACKS = _from_setup_script()
DEFAULT_STACK = "titan-0.3.0"
