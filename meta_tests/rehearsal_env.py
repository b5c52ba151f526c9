"""Where the meta tests find the rehearsal environment (``bash scripts/setup-venv.sh rehearsal``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fixtures.launch.device_isolation import launch_environment
from fixtures.repo import SESSION_ENV

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
VENV = REPO / ".venv-rehearsal"
PYTHON = VENV / "bin" / "python"
NEURON_LS = VENV / "bin" / "neuron-ls"


def require() -> Path:
    """The rehearsal environment's python; a missing environment fails the test (never a skip)."""
    if not PYTHON.exists():
        pytest.fail(f"the rehearsal environment {VENV} does not exist: build it with "
                    "`bash scripts/setup-venv.sh rehearsal` (scripts/selftest.sh does)", pytrace=False)
    return PYTHON


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a process outside this session would have (device-backend autoload as
    the user set it, none of the session's own markers), plus ``extra``."""

    drop = ("CONFORMANCE_SESSION_ID", "CONFORMANCE_REPORT_DIR", "PYTEST_XDIST_WORKER")
    env = launch_environment({k: v for k, v in os.environ.items() if k not in drop})
    return {**env, **extra}


def rehearsal_pytest(tmp_path: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``pytest *args`` in the rehearsal environment, started as from outside this session (no
    session marker, no core binding of its own), the stand-in's core locks under ``tmp_path``."""
    clean = {k: v for k, v in clean_env().items()
             if k not in (SESSION_ENV, "NEURON_RT_VISIBLE_CORES", "NEURON_LOGICAL_NC_CONFIG")}
    return subprocess.run([str(require()), "-m", "pytest", *args], cwd=REPO,
                          env={**clean, "NEURON_REHEARSAL_LOCK_DIR": str(tmp_path / "locks")},
                          capture_output=True, text=True, timeout=timeout)
