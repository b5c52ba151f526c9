"""The rehearsal's cheap contracts on CPython 3.12 (the TorchNeuron beta's Python) are a CI
step that can fail: ``scripts/rehearse-py312.sh`` runs ``-m 'trn2 and not slow'`` in a venv
built from nothing on 3.12 (``bash scripts/setup-venv.sh rehearsal-py312``), fails if the run
cache recorded a launch, and ``scripts/selftest.sh`` runs it and exits with its status.
The session itself runs in CI (about a minute, README "What has run where"), not here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fixtures.repo import REPO_ROOT as REPO

pytestmark = pytest.mark.meta


def test_the_py312_stacks_refuse_another_python():
    """A 3.12 stack built on another interpreter would be a 3.11 venv under a 3.12 name: the
    build stops before creating anything, naming the interpreter and where 3.12 is looked for."""
    assert sys.version_info[:2] != (3, 12), "this check needs a meta session on a Python other than 3.12"
    for stack in ("titan-0.3.0-py312", "rehearsal-py312"):
        proc = subprocess.run(["bash", "scripts/setup-venv.sh", stack], cwd=REPO, capture_output=True, text=True,
                              env={**os.environ, "CONFORMANCE_PYTHON312": sys.executable}, timeout=60)
        assert proc.returncode == 2 and proc.stdout == "", (stack, proc.returncode, proc.stdout, proc.stderr)
        assert f"stack {stack} needs CPython 3.12" in proc.stderr and sys.executable in proc.stderr, proc.stderr


def test_selftest_runs_the_py312_rehearsal_and_fails_with_it():
    """The step runs after the 3.11 rehearsal, and its exit status is among those selftest exits with."""
    text = (REPO / "scripts" / "selftest.sh").read_text()
    assert text.index("scripts/rehearse-py312.sh") > text.index("bash scripts/rehearse-trn2-upgrade.sh")
    assert re.search(r'bash scripts/rehearse-py312\.sh "\$REHEARSAL_HOST" "\$@"\npy312=\$\?\n', text), text
    assert re.search(r'for status in [^\n]*"\$py312"; do', text)


def test_the_py312_step_selects_no_launch_and_checks_the_run_cache():
    """The selection is the cheap one, and a launch during it (a launching contract without
    the ``slow`` marker) is a failure naming the cause, not a slower green."""
    text = (REPO / "scripts" / "rehearse-py312.sh").read_text()
    assert '-m "trn2 and not slow"' in text and "setup-venv.sh rehearsal-py312" in text
    assert 'if [ "$after" -ne "$before" ]' in text and "culprit: a launching contract without the slow marker" in text
