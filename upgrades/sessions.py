"""The sessions an upgrade check runs, each a pytest session of the suite read back as its
``SessionReport``: the candidate's, and the trusted stack's (its committed baseline on cpu or
its session here on trn2, the checkpoint and export it writes for the candidate's
cross-version contracts, and, where the baseline was recorded on another machine, the
contracts it is asked again here before the candidate is blamed)."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from fixtures.tiers.tier_name import Tier
from reports.session_report import SessionReport
from upgrades import candidate_env
from upgrades.console import say
from upgrades.stacks import REPO, Stack

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


COMPAT_CONTRACTS = ["conformance/test_compat.py", "-m", "cpu"]


def baseline_of(stack: Stack) -> Path:
    """The committed baseline of the trusted stack (its stack id, asked of its own venv)."""
    proc = subprocess.run([str(stack.venv / "bin" / "python"), "-c",
                           "from fixtures.tiers import stack; print(stack.stack_id('cpu'))"],
                          capture_output=True, text=True, cwd=REPO, check=True)
    return REPO / "reports" / "baselines" / f"{proc.stdout.strip()}.json"


def trusted_stack_id(stack: Stack) -> str:
    return baseline_of(stack).stem


def trusted_artifacts(stack: Stack, out: Path) -> list[str]:
    """What the trusted stack writes for the candidate to read (``fixtures.runs.trusted_artifacts``):
    its cross-version contracts run in the trusted venv (their runs come from its run cache
    after the first time), then the folder written from that session; the pytest options
    that hand it to the candidate. Where the trusted stack cannot write it, the candidate's
    cross-version contracts read the candidate's own runs, and the page says so."""
    python = stack.venv / "bin" / "python"
    report_dir, folder = out / "trusted", out / "trusted-artifacts"
    say(f"upgrade: the trusted stack writes its checkpoint and export for the candidate ({folder})")
    proc = subprocess.run([str(python), "-m", "pytest", *COMPAT_CONTRACTS, "-q", "--report-dir", str(report_dir)],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        say(f"upgrade: the trusted stack's own cross-version contracts exited {proc.returncode}: "
            "the candidate reads its own runs instead\n" + proc.stdout[-1500:])
        return []
    proc = subprocess.run([str(python), "-m", "fixtures.runs.trusted_artifacts", "write", str(report_dir), str(folder)],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        say(f"upgrade: {proc.stderr.strip()}: the candidate reads its own runs instead")
        return []
    return ["--trusted-artifacts", str(folder)]


@dataclass(frozen=True)
class BaselineChoice:
    """What the candidate is compared with, and how its session is told so."""

    report: SessionReport  # the baseline report
    path: Path
    inherit: tuple[str, ...]  # --inherit-expectations STACK: the trusted stack's expectations
    extra: tuple[str, ...]  # every further option of the candidate's session (artifacts, constraints)
    today: SessionReport | None  # today's trusted report, where one was run

    @property
    def candidate_options(self) -> list[str]:
        return [*self.inherit, *self.extra]

    def page_path(self, out: Path) -> str:
        """The baseline as the page in ``out`` names it: from the page's folder, else from the
        repository, else its file name."""
        if self.path.is_relative_to(out):
            return str(self.path.relative_to(out))
        return str(self.path.relative_to(REPO)) if self.path.is_relative_to(REPO) else self.path.name


def choose_baseline(args, stack: Stack, env, out: Path, selection: list[str]) -> BaselineChoice:
    """On trn2 the trusted session run here (or --baseline-report), on cpu the committed
    baseline plus the trusted stack's artifacts and the candidate's pins."""
    if args.tier == Tier.TRN2:
        if args.baseline_report is not None:
            path = args.baseline_report.resolve() / "report.json"
            baseline = SessionReport.load(path)
        else:
            baseline = run_suite(trusted_env(stack), out / "trusted-suite", selection)
            path = out / "trusted-suite" / "report.json"
        return BaselineChoice(baseline, path, ("--inherit-expectations", baseline.stack_id["trn2"]), (), None)
    path = baseline_of(stack)
    extra = trusted_artifacts(stack, out)
    today_report = out / "trusted" / "report.json"
    if args.trusted_today:
        run_suite(trusted_env(stack), out / "trusted-today", selection)
        today_report = out / "trusted-today" / "report.json"
    if env.constraints is not None:  # the pins move with the candidate
        extra += ["--stack-constraints", str(env.constraints)]
    today = SessionReport.load(today_report) if today_report.is_file() else None
    return BaselineChoice(SessionReport.load(path), path, ("--inherit-expectations", trusted_stack_id(stack)),
                          tuple(extra), today)


def trusted_here(args, stack: Stack, baseline: SessionReport, candidate: SessionReport, suspects: list[str],
                 out: Path, today: SessionReport | None) -> SessionReport | None:
    """Before blaming the candidate: where the baseline was recorded on another machine (its
    kernel paths, ``fixtures.tiers.machine``) and contracts newly fail or figures moved
    (``suspects``: ``Comparison.suspects``), the trusted stack runs those contracts, only those
    not already in today's trusted session (``today``: ``--trusted-today``, or the cross-version
    contracts the upgrade runs anyway), here. Returns today's session with these added, or None
    where nothing needs asking."""
    if args.tier == Tier.TRN2:  # on trn2 the baseline is a trusted session run here
        return None
    key = lambda report: report.machine.numerics_key if report.machine else None
    if key(baseline) is not None and key(baseline) == key(candidate):
        return None
    covered = {c.nodeid for c in today.contracts} if today else set()
    asked = [nodeid for nodeid in suspects if nodeid not in covered]
    if not asked:
        return None
    where = (baseline.machine.numerics_label if baseline.machine else None) or "an unrecorded machine"
    here_label = candidate.machine.numerics_label if candidate.machine and candidate.machine.numerics_label else "?"
    say(f"upgrade: the baseline was recorded on {where}, this machine is {here_label}: the trusted stack runs the "
        f"{len(asked)} contract(s) that failed or moved, here, before the candidate is blamed")
    here = run_suite(trusted_env(stack), out / "trusted-here", [*asked, "-m", args.tier])
    if today is None:
        return here
    rerun = set(asked)
    return replace(here, contracts=tuple(c for c in today.contracts if c.nodeid not in rerun) + here.contracts,
                   session=f"{today.session} + {here.session}")


def only_what_both_ran(baseline: SessionReport, candidate: SessionReport) -> SessionReport:
    """The baseline with only the contracts the candidate's session ran (a selection, or trn2)."""
    ran = {c.nodeid for c in candidate.contracts}
    return replace(baseline, contracts=tuple(c for c in baseline.contracts if c.nodeid in ran))
