"""What changes between a trusted stack's baseline report and a candidate's report, for a user
deciding an upgrade: versions, contract outcomes, the figures that matter, a verdict.

A pure function of two session reports (``reports.session_report``) and the versions that
moved, returning a ``upgrades.comparison.Comparison``, so the logic is tested on synthetic
pairs (``meta_tests/test_upgrade.py``) without installing anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from fixtures.session.expectations import failed_differently
from reports import gate
from reports.session_report import ContractRecord, SessionReport
from upgrades import causes
from upgrades.candidate_env import Change
from upgrades.comparison import (Comparison, ContractChange, FailingDetail, FailureGroup, FigureChange, HeldDeviation,
                                 RunChange, RunFigures, SessionRuns, Today)
from upgrades.verdict import ContractVerdict, Owner

GOOD = {"passed", "xfailed"}
BAD = {"failed", "error", "xpassed"}

# category -> (title in upgrade.md, blocks the upgrade)
CATEGORIES = {
    "newly failing": ("Newly failing (a regression of the candidate)", True),
    "missing": ("Missing from the candidate's run", True),
    "newly skipped": ("Skipped where the baseline ran it", True),
    "upstream fixed": ("Known deviations the candidate fixes (delete their expectations line)", False),
    "newly passing": ("Newly passing", False),
    # a newly failing contract the trusted stack fails today on this machine too: the baseline's
    # machine took other kernel paths (or the checkout changed); not the candidate's
    "fails with the trusted stack here": ("Failing on this machine with the trusted stack too (this machine's, "
                                          "not the candidate's)", False),
    "new": ("New in the candidate's run", False),
}
HERE_TOO = "fails with the trusted stack here"


def categorize(before: str | None, after: str | None, message: str = "") -> str:
    if after is None:
        return "missing"
    if before is None:
        return "new"
    if before == "xfailed" and (after in ("xpassed", "passed") or "XPASS(strict)" in message):
        return "upstream fixed"  # XPASS under inherited expectations, or a pass under its own file
    if before in GOOD and after in BAD:
        return "newly failing"
    if before != "skipped" and after == "skipped":
        return "newly skipped"
    if before in BAD and after in GOOD:
        return "newly passing"
    return "unchanged"


def _run_figures(report: SessionReport) -> Mapping[str, RunFigures]:
    """Per run description: step-1 loss, mean step time after the first (compilation) step,
    peak memory, all as rank 0 recorded them."""
    out = {}
    for run in report.runs:
        times = [s.step_time_s for s in run.steps[1:] if s.step_time_s is not None]
        mems = [s.memory_gib for s in run.steps if s.memory_gib is not None]
        out[run.description] = RunFigures(ok=run.ok, step1_loss=run.steps[0].loss if run.steps else None,
                                          step_time_s=sum(times) / len(times) if times else None,
                                          peak_memory_gib=max(mems) if mems else None)
    return out


def launches(report: SessionReport) -> SessionRuns:
    """Distinct runs the session used, and how many it launched itself (the rest came from
    the run cache of an earlier session of the same stack)."""
    return SessionRuns(runs=len(report.runs), launched=sum(1 for r in report.runs if r.session == report.session))


def mark_against_today(measured: Iterable[FigureChange], today: SessionReport | None) -> tuple[list[FigureChange], int]:
    """Each moved figure that a trusted session of today's checkout also measured, with its value
    today (``today``): a stale baseline where the committed baseline's value is not what the
    trusted stack measures now (the move is then the checkout's, not the candidate's, when the
    candidate equals today's). Returns the figures and how many today's session measured."""
    if not today:
        return list(measured), 0
    now = {c.nodeid: c.measured for c in today.contracts}
    marked, seen = [], 0
    for m in measured:
        value = now.get(m.nodeid, {}).get(m.name, _ABSENT)
        if value is not _ABSENT:
            seen += 1
            m = FigureChange(m.nodeid, m.name, m.before, m.after,
                             Today(value, stale_baseline=value != m.before, candidates_move=value != m.after))
        marked.append(m)
    return marked, seen


_ABSENT = object()


def mark_outcomes_against_today(contracts: Iterable[ContractChange], today: SessionReport | None
                                ) -> list[ContractChange]:
    """Each newly failing contract that the trusted stack also fails in ``today``'s session (on
    this machine, this checkout) is recategorised: the failure is this machine's, not the
    candidate's."""
    now = today.outcomes if today else {}
    return [ContractChange(c.nodeid, c.before, c.after, HERE_TOO, c.failing, c.expectation, c.not_remeasured,
                           today=now[c.nodeid])
            if c.category == "newly failing" and now.get(c.nodeid) in BAD else c for c in contracts]


def compare(baseline: SessionReport, candidate: SessionReport, changes: Sequence[Change] = (),
            pip_check: Sequence[str] | None = None, today: SessionReport | None = None) -> Comparison:
    """The upgrade's comparison. ``changes``: the versions that moved. ``today``: a trusted
    session of this checkout (all of the selection, or the cross-version contracts the upgrade
    runs anyway), to tell a moved figure from a stale baseline."""
    base = {c.nodeid: c for c in baseline.contracts}
    cand = {c.nodeid: c for c in candidate.contracts}
    contracts = mark_outcomes_against_today([_contract_change(nodeid, base.get(nodeid), cand.get(nodeid))
                                             for nodeid in sorted(set(base) | set(cand))], today)
    other_suite = gate.other_suite(baseline, candidate)  # another suite measured other things
    measured, unchanged_figures, compared_figures = ([], [], 0) if other_suite else _figure_changes(base, cand)
    measured, remeasured = mark_against_today(measured, today)
    runs_b, runs_c = _run_figures(baseline), _run_figures(candidate)
    counts = {k: sum(1 for c in contracts if c.category == k) for k in CATEGORIES}
    groups, unmeasured = causes.explain(contracts, cand, {r.key: r for r in candidate.runs if r.key})
    contracts = [replace(c, not_remeasured=unmeasured.get(c.nodeid)) if c.holds_a_deviation else c for c in contracts]
    xfails = [c for c in contracts if c.holds_a_deviation]
    still = [HeldDeviation(c.nodeid, c.expectation) for c in xfails if not c.not_remeasured]
    verdict = contract_verdict(_problems(contracts, counts, pip_check, candidate), groups, counts["upstream fixed"],
                               still, counts[HERE_TOO])
    return Comparison(
        verdict=verdict, contracts=tuple(contracts), counts=counts, versions=tuple(changes), measured=tuple(measured),
        unchanged_figures=tuple(unchanged_figures), figures_compared=compared_figures, groups=tuple(groups),
        still_holding=tuple(still),
        not_remeasured=tuple(HeldDeviation(c.nodeid, why=c.not_remeasured) for c in xfails if c.not_remeasured),
        runs=tuple(RunChange(name, runs_b[name], runs_c[name]) for name in sorted(set(runs_b) & set(runs_c))),
        baseline_runs=launches(baseline), candidate_runs=launches(candidate), pip_check=tuple(pip_check or ()),
        stack_preflight=candidate.stack_preflight, baseline_session=baseline.session or None,
        today_session=(today.session or None) if today else None, figures_remeasured_today=remeasured,
        other_suite=other_suite, baseline_stack=baseline.stack_id or None, candidate_stack=candidate.stack_id or None)


def _contract_change(nodeid: str, b: ContractRecord | None, c: ContractRecord | None) -> ContractChange:
    """One contract's outcome before and after, its category, and what explains it."""
    before, after = b and b.outcome, c and c.outcome
    category = categorize(before, after, (c.message or "") if c else "")
    if category == "newly failing":
        message = c.message or ""
        return ContractChange(nodeid, before, after, category, failing=FailingDetail(
            message=message, runs=c.runs, repro_bundle=c.repro_bundle,
            differently=failed_differently(message)))  # a known deviation failing otherwise
    if category == "unchanged" and before == "xfailed" and after == "xfailed":
        return ContractChange(nodeid, before, after, category, expectation=c.expectation)  # re-measured: causes
    if category == "upstream fixed":
        return ContractChange(nodeid, before, after, category, expectation=b.expectation or (c and c.expectation))
    return ContractChange(nodeid, before, after, category)


def _figure_changes(base: Mapping[str, ContractRecord], cand: Mapping[str, ContractRecord]
                    ) -> tuple[list[FigureChange], list[str], int]:
    """The figures both sessions measured: those that moved, those that did not, how many."""
    measured, unchanged_figures, compared_figures = [], [], 0
    for nodeid in sorted(set(base) & set(cand)):
        mb, mc = base[nodeid].measured, cand[nodeid].measured
        pairs: list[tuple[str, Any, Any]] = [(name, mb[name], mc[name]) for name in sorted(set(mb) & set(mc))]
        db, dc = base[nodeid].exported_dtypes, cand[nodeid].exported_dtypes
        if db and dc:
            pairs.append(("exported dtypes", db, dc))
        for name, before, after in pairs:
            compared_figures += 1
            if before != after:
                measured.append(FigureChange(nodeid, name, before, after))
            else:
                unchanged_figures.append(f"{nodeid.split('::', 1)[-1]}: {name} = {fmt(before)}")
    return measured, unchanged_figures, compared_figures


def _problems(contracts: Sequence[ContractChange], counts: Mapping[str, int], pip_check: Sequence[str] | None,
              candidate: SessionReport) -> list[str]:
    """What fails the candidate: blocking categories, a new contract that fails (as the
    gate), pip check, an incomplete session."""
    blocking = {k for k, (_, blocks) in CATEGORIES.items() if blocks}
    problems = [f"{counts[k]} {k}" for k in CATEGORIES if k in blocking and counts[k]]
    new_failing = [c for c in contracts if c.category == "new" and c.after in BAD]
    if new_failing:
        problems.append(f"{len(new_failing)} new contract(s) failing (not in the baseline)")
    if pip_check:
        problems.append("pip check fails")
    if not candidate.complete:
        problems.append("the candidate's session did not complete")
    return problems


def contract_verdict(problems: Sequence[str], groups: Sequence[FailureGroup], fixed: int,
                     still: Sequence[HeldDeviation], fail_here_too: int) -> ContractVerdict:
    """The contracts' side of the verdict, with the failures' owners in name order (its
    ``body`` says which parts a verdict shows: problems outrank fixes, fixes the deviations)."""
    owners = {}  # owner -> its groups
    for g in groups:
        owners.setdefault(g.owner, []).append(g)
    return ContractVerdict(problems=tuple(problems),
                           owners=tuple(Owner(owner, sum(len(g.contracts) for g in gs), len(gs))
                                        for owner, gs in sorted(owners.items())),
                           fixed=fixed, still_holding=len(still), fail_here_too=fail_here_too)


def fmt(value) -> str:
    """A figure as the page shows it: 6 significant digits, a JSON list of numbers by its
    largest magnitude, "-" for none."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str) and value.startswith("["):
        try:
            values = json.loads(value)
        except ValueError:
            values = None
        if values and all(isinstance(v, (int, float)) for v in values):
            return f"max abs {max(abs(v) for v in values):.3g} over {len(values)} values"
    return str(value)
