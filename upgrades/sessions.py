"""A pytest session of the suite in a candidate (or the trusted) environment, its output live
on the terminal, read back as its ``SessionReport``."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from reports.session_report import SessionReport
from upgrades import candidate_env
from upgrades.console import say
from upgrades.stacks import REPO


def describe_selection(selection: list[str]) -> str:
    """A long pytest argument list in a few words: how many node ids it names (contracts) and
    the options it passes, never its argument count called contracts."""
    nodeids = [a for a in selection if "::" in a]
    options = " ".join(a for a in selection if "::" not in a)
    return (f"<{len(nodeids)} contracts> " if nodeids else "") + options


def run_suite(env: candidate_env.CandidateEnv, report_dir: Path, selection: list[str]) -> SessionReport:
    """The suite in the candidate environment, its output live on the terminal."""
    shown = " ".join(selection) if len(selection) <= 6 else describe_selection(selection)
    say(f"upgrade: running `pytest {shown}` in {env.venv}")
    started = time.monotonic()
    proc = subprocess.run([str(env.python), "-m", "pytest", *selection, "--report-dir", str(report_dir)],
                          cwd=REPO)
    say(f"upgrade: the candidate's session exited {proc.returncode} after {time.monotonic() - started:.0f} s")
    path = report_dir / "report.json"
    if not path.exists():
        raise candidate_env.CandidateError(f"the candidate's session wrote no report ({path})")
    return SessionReport.load(path)


def trusted_env(stack) -> candidate_env.CandidateEnv:
    """The trusted stack's own environment, as a candidate environment without pins."""
    return candidate_env.CandidateEnv(stack=stack.name, pins=[], root=stack.venv.parent, venv=stack.venv)
