"""The Neuron dress rehearsal as a user meets it: stand-ins only behind the option, a
rehearsal labelled everywhere, refused as trn2 evidence, and never green with a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.tiers import rehearsal
from fixtures.repo import SESSION_ENV
from fixtures.runs.plan import launch_plan
from fixtures.runs.spec import RunSpec
from meta_tests import rehearsal_env
from fixtures.tiers import tier_profile
from reports import gate
from reports.pins import NotTrusted, trusted
from reports.session_report import SessionReport

pytestmark = pytest.mark.meta

from fixtures.repo import REPO_ROOT as REPO  # noqa: E402
SESSION = Path(__file__).resolve().parent / "sessions" / "rehearsal_session.py"


def test_standins_are_unreachable_without_the_option(tmp_path):
    """This session was started without ``--neuron-dress-rehearsal`` in a cpu environment: no
    stand-in distribution is installed, no stand-in module is importable here or in a launched
    rank, and none of their folders is on sys.path or a rank's PYTHONPATH."""
    assert not rehearsal.active()
    assert not any(rehearsal.standin_versions().values())  # no stand-in distribution installed here
    assert not any(str(rehearsal.STANDIN_ROOT) in p for p in sys.path)
    plan = launch_plan(RunSpec(config="dense_native"), tier_profile.cpu_profile(), tmp_path,
                       hf_assets=tmp_path, dataset=tmp_path)
    assert str(rehearsal.STANDIN_ROOT) not in plan.env["PYTHONPATH"]
    code = "import importlib.util as u; print([n for n in ('torch_neuronx','nkilib','torchtitan_neuron') if u.find_spec(n)])"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": plan.env["PYTHONPATH"]})
    assert proc.stdout.strip() == "[]" and proc.returncode == 0, proc.stdout + proc.stderr


def test_the_option_in_a_cpu_environment_is_a_usage_error_naming_the_setup(tmp_path):
    """--neuron-dress-rehearsal where the stand-ins are not installed stops with the command
    that builds the rehearsal environment (exit 4), never a run of skips."""
    proc = subprocess.run([sys.executable, "-m", "pytest", str(SESSION), "-m", "trn2", "--neuron-dress-rehearsal",
                           "--report-dir", str(tmp_path / "r")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=rehearsal_env.clean_env())
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "is not the rehearsal environment" in proc.stderr and "scripts/setup-venv.sh rehearsal" in proc.stderr


def _rehearse(tmp_path: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in (SESSION_ENV, "CONFORMANCE_REPORT_DIR", "PYTEST_XDIST_WORKER")}
    return subprocess.run(
        [str(rehearsal_env.require()), "-m", "pytest", str(SESSION), "-m", "trn2", "--neuron-dress-rehearsal",
         "--report-dir", str(tmp_path / "report"), *extra],
        cwd=REPO, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_rehearsal_says_so_everywhere_and_is_not_evidence(tmp_path):
    proc = _rehearse(tmp_path, "-k", "not skips")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "NEURON DRESS REHEARSAL" in out and "1 failed, 3 passed" in out, out
    report = SessionReport.load(tmp_path / "report")
    assert report.rehearsal is True
    assert report.stack_id["trn2"].startswith("rehearsal-trn2-")
    assert "NEURON DRESS REHEARSAL" in (tmp_path / "report" / "summary.md").read_text()
    bundle = next((tmp_path / "report" / "repro").iterdir())
    assert "rehearsal" in (bundle / "REHEARSAL.txt").read_text()
    rerun = (bundle / "rerun.sh").read_text()
    assert "--neuron-dress-rehearsal" in rerun and "--hypothesis-profile repro-trn2" in rerun
    assert ".venv-rehearsal/bin/python" in rerun and str(REPO) not in rerun, rerun  # no machine path
    # the Neuron debug material, produced by the stand-ins as the real layer would
    neuron = bundle / "neuron"
    assert "instance-type: trn2.3xlarge" in (neuron / "neuron-ls.start.txt").read_text()
    assert "instance-type: trn2.3xlarge" in (neuron / "neuron-ls.at-failure.txt").read_text()
    assert "NEURON_LOGICAL_NC_CONFIG=2" in (neuron / "environment.txt").read_text()
    assert "NEURON_COMPILE_CACHE_URL=" in (neuron / "environment.txt").read_text()
    for name in ("runtime-lines.txt", "compile-cache.txt", "core-dumps.txt"):
        assert (neuron / name).exists(), name
    junit = (tmp_path / "report" / "junit.xml").read_text()
    assert 'name="rehearsal" value="true"' in junit and "NEURON DRESS REHEARSAL" in junit
    # The gate and the baseline promotion refuse it as evidence.

    cpu_baseline = SessionReport.load(REPO / "reports" / "baselines" / "cpu-torch2.14-titan0.3.json")
    result = gate.compare(cpu_baseline, report)
    assert not result.ok and "not trn2 evidence" in result.text()
    passing = replace(report, contracts=tuple(c for c in report.contracts if c.outcome == "passed"))
    with pytest.raises(NotTrusted, match="dress rehearsal"):
        trusted(passing)


@pytest.mark.slow
def test_a_skip_fails_a_rehearsal(tmp_path):
    proc = _rehearse(tmp_path, "-k", "skips", env={"REHEARSAL_SESSION_SKIP": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "every collected trn2 contract must run its body" in out, out


def test_a_rank_registers_the_kernel_with_nki_op():
    """On the device side (a launched rank) the write-up's wrapper registers the NKI kernel
    through ``torch_neuronx.nki_op``, as the Neuron docs do; elsewhere torch.library."""
    code = ("import torch, torch_neuronx; from fixtures.rank.kernels import adapter; "
            "print(adapter._registrar('nki') is torch_neuronx.nki_op, "
            "adapter._registrar('reference') is torch.library.custom_op)")
    env = rehearsal_env.clean_env(PYTHONPATH=str(REPO))
    proc = subprocess.run([str(rehearsal_env.require()), "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.stdout.split() == ["True", "True"], proc.stdout + proc.stderr


def test_the_option_alone_does_not_select_a_tier(tmp_path):
    proc = subprocess.run([str(rehearsal_env.require()), "-m", "pytest", str(SESSION), "--neuron-dress-rehearsal",
                           "--report-dir", str(tmp_path / "r")],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=rehearsal_env.clean_env())
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR
    assert "add -m trn2" in proc.stderr
