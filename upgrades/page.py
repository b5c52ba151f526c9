"""``upgrade.md``: the page a user reads before an upgrade, rendered from the check's one
``UpgradeResult`` (``upgrades.result``): the verdict, the versions, the contracts by category
and by cause, the bisection, the performance section, the figures that moved and the runs."""

from __future__ import annotations

from upgrades.compare import CATEGORIES, fmt
from upgrades.comparison import Comparison
from upgrades.result import BisectFindings, UpgradeResult

SHOWN_PER_GROUP = 12


def render(result: UpgradeResult, *, title: str) -> str:
    comparison = result.comparison
    lines = [f"# {title}", "", f"**Verdict: {result.verdict.text()}**", ""]
    for found in comparison.stack_preflight:
        if not found.ok:
            lines += ["The candidate's stack preflight failed, so no run was launched:", "", "```",
                      found.message, "```", ""]
    lines += _versions_section(comparison)
    lines += _contracts_section(comparison, result.selection)
    lines += _bisect_section(result.bisect)
    lines += [""] + list(result.performance.lines if result.performance else ())
    lines += _figures_section(comparison)
    lines += _runs_section(comparison)
    if result.promote:
        lines += ["", "## Promote the candidate", "", "```bash", *result.promote, "```"]
    return "\n".join(lines) + "\n"


def _versions_section(comparison: Comparison) -> list[str]:
    """Every package the candidate moved, with the build of a git one."""
    lines = ["## Versions (trusted -> candidate)", "",
             "| package | trusted | candidate | change | build |", "|---|---|---|---|---|"]
    for c in comparison.versions:
        build = ""
        if c.commit:
            build = f"git {c.commit[:10]}" + (f", {c.date[:10]}" if c.date else ", date not known")
        if c.source:
            build = f"{c.source}" + (f": {build}" if build else "")
        lines.append(f"| {c.name} | {c.old or 'not installed'} | {c.new or 'removed'} | {c.kind} | {build} |")
    if comparison.pip_check:
        lines += ["", "pip check: " + "; ".join(comparison.pip_check)]
    return lines


def _contracts_section(comparison: Comparison, selection: tuple[str, ...]) -> list[str]:
    """Outcomes: counts, failures by cause, deviations, and each category."""
    lines = ["", "## Contracts", ""]
    unchanged = sum(1 for c in comparison.contracts if c.category == "unchanged")
    lines.append(", ".join([f"{unchanged} unchanged"] + [f"{n} {k}" for k, n in (comparison.counts or {}).items()
                                                        if n]) + ".")
    if selection:
        lines.append(f"Selection run in the candidate: `pytest {' '.join(selection)}`.")
    if comparison.groups:
        lines += ["", "### Newly failing, by cause", ""]
        for g in comparison.groups:
            where = f" in `{g.culprit}`" if g.culprit else ""
            bundle = f"; repro bundle: `{g.repro_bundle}`" if g.repro_bundle else ""
            lines.append(f"- **{len(g.contracts)} contract(s)**, {g.owner}{where}: `{g.cause}`{bundle}")
            lines += [f"  - `{n}`" for n in g.contracts[:SHOWN_PER_GROUP]]
            if len(g.contracts) > SHOWN_PER_GROUP:
                lines.append(f"  - ... and {len(g.contracts) - SHOWN_PER_GROUP} more")
    lines += _deviations_section(comparison)
    for key, (heading, _) in CATEGORIES.items():
        picked = [c for c in comparison.contracts if c.category == key]
        if not picked or key == "newly failing" and comparison.groups:
            continue
        lines += ["", f"### {heading}", ""]
        for c in picked:
            extra = ""
            if c.repro_bundle:
                extra = f" (repro bundle: `{c.repro_bundle}`)"
            if c.expectation:
                extra = f" (delete `{c.expectation}`)"
            lines.append(f"- `{c.nodeid}`: {c.before or 'absent'} -> {c.after or 'absent'}{extra}")
    return lines


def _deviations_section(comparison: Comparison) -> list[str]:
    """The known deviations both sides fail as recorded: still holding, or not re-measured."""
    lines = []
    if comparison.still_holding:
        lines += ["", "### Known deviations still holding", ""]
        stacks = comparison.baseline_stack or {}
        recorded = stacks.get("cpu") or stacks.get("trn2")
        if recorded:
            lines.append(f"Their reasons were recorded on the trusted stack ({recorded}): where a reason names "
                         "a package version, it is that stack's, measured again here on the candidate's.")
            lines.append("")
        lines += [f"- `{d.nodeid}`" + (f" ({d.expectation})" if d.expectation else "") for d in comparison.still_holding]
    if comparison.not_remeasured:
        lines += ["", "### Known deviations not re-measured", ""]
        lines += [f"- `{d.nodeid}`: {d.why}" for d in comparison.not_remeasured]
    return lines


def _bisect_section(bisect: BisectFindings | None) -> list[str]:
    """Which package change flips each contract (--bisect)."""
    if not bisect:
        return []
    lines = ["", "## Bisect: which package change flips each contract", "",
             f"{bisect.environments_built} environment(s) built, {bisect.environments_reused} reused "
             "(one per asked package, each with the transitive changes it forces).", ""]
    groups = {}  # who flips -> the node ids
    for nodeid, who in bisect.attribution.items():
        groups.setdefault(who, []).append(nodeid)
    for who, nodeids in groups.items():
        lines.append(f"- {who}: {len(nodeids)} contract(s)")
        lines += [f"  - `{n}`" for n in nodeids]
    return lines


def _whose_move(m) -> str:
    if m.today is None:
        return "not re-measured today"
    if not m.today.candidates_move:
        return "this machine's or the checkout's (the trusted stack measures the same here today): not the candidate's"
    return "the candidate's" + (" (the baseline is stale too)" if m.today.stale_baseline else "")


def _figures_section(comparison: Comparison) -> list[str]:
    """The measured figures against the trusted stack's."""
    lines = ["## Figures that moved", ""]
    if comparison.other_suite:
        return lines + [f"Not compared: {comparison.other_suite}.", ""]
    if comparison.baseline_session:
        lines.append(f"Compared with the trusted session `{comparison.baseline_session}`"
                     + (f"; {comparison.figures_remeasured_today} of the moved figures re-measured by the "
                        f"trusted stack today (session `{comparison.today_session}`)" if comparison.today_session
                        else "; none re-measured on this checkout") + ".")
        lines.append("")
    if comparison.measured:
        lines += ["| contract | figure | trusted | trusted today | candidate | whose move |", "|---|---|---|---|---|---|"]
        for m in comparison.measured:
            lines.append(f"| `{m.nodeid.split('::', 1)[-1]}` | {m.name} | {fmt(m.before)} | "
                         f"{fmt(m.today.value) if m.today else '-'} | {fmt(m.after)} | {_whose_move(m)} |")
    elif comparison.figures_compared:
        lines.append(f"None of the {comparison.figures_compared} figures both sessions measured changed.")
    else:
        lines.append("No figure was compared: the candidate measured none of the figures the baseline "
                     "measured (nothing can be said of them).")
    if comparison.unchanged_figures:
        lines += ["", f"Unchanged ({len(comparison.unchanged_figures)}):", ""]
        lines += [f"- `{text}`" for text in comparison.unchanged_figures]
    return lines


def _runs_section(comparison: Comparison) -> list[str]:
    """The training runs of both sessions, rank 0's step-1 loss, step time and memory."""
    base, cand = comparison.baseline_runs, comparison.candidate_runs
    lines = ["", "## Training runs (rank 0)", "",
             f"Runs used: trusted session {base.runs} ({base.launched} launched in it, the rest from the run cache), "
             f"candidate session {cand.runs} ({cand.launched} launched).", "",
             "Step time and memory here are one launch of each, not judged (the Performance section "
             "judges them over interleaved launches).", "",
             "| run | step-1 loss | step time s | peak memory GiB |", "|---|---|---|---|"]
    for r in comparison.runs:
        b, a = r.before, r.after
        lines.append(f"| {r.run} | {fmt(b.step1_loss)} -> {fmt(a.step1_loss)} | "
                     f"{fmt(b.step_time_s)} -> {fmt(a.step_time_s)} | "
                     f"{fmt(b.peak_memory_gib)} -> {fmt(a.peak_memory_gib)} |")
    return lines
