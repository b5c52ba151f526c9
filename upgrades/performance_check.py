"""The upgrade check's performance step: interleaved performance sessions of both stacks
(``upgrades.perf_launch``), judged by the tier's thresholds (``upgrades.perf_compare``), set
against the stored history of this machine (``upgrades.perf_history``), whose trusted
sessions it stores; the page's section (``upgrades.perf_page``) with it."""

from __future__ import annotations

from pathlib import Path

from fixtures.oracles.performance import CPU_PERF, TRN2_PERF, PerfPolicy
from fixtures.tiers.tier_name import Tier
from upgrades import perf_compare, perf_history, perf_launch, perf_page
from upgrades.console import say
from upgrades.perf_compare import Verdict
from upgrades.perf_launch import Launch
from upgrades.result import PerformanceCheck
from upgrades.stacks import REPO
from upgrades.verdict import Finding

NOT_ASKED = PerformanceCheck(
    Verdict((Finding.NOT_MEASURED,), accepted=True),
    lines=("## Performance: NOT MEASURED (accepted: the user asked for `--performance-launches 0`)",
           "", "Step time and memory were not compared; this page says nothing about them.", ""))


def rehearsal_options(selection: list[str]) -> list[str]:
    """The rehearsal's options of the selection that the performance sessions must share with
    it: the rehearsal itself and its host (without the host, the sessions ran on the default
    host, another machine than the suite's sessions and the history's A/A series)."""
    out = []
    for index, arg in enumerate(selection):
        if arg == "--neuron-dress-rehearsal" or arg.startswith("--rehearsal-host="):
            out.append(arg)
        elif arg == "--rehearsal-host" and index + 1 < len(selection):
            out += [arg, selection[index + 1]]
    return out


def performance_policy(args, launches: list[Launch]) -> PerfPolicy:
    """The tier's thresholds: cpu's, measured here; trn2's from an A/A series of this host type
    in the stored history (``upgrades.perf_history.aa_policy``), else its stakes, unjudged."""
    if args.tier != Tier.TRN2:
        return CPU_PERF
    trusted = next((l for l in launches if l.stack == "trusted" and l.report is not None), None)
    if trusted is None:
        return TRN2_PERF
    stored = perf_history.load(args.history, trusted.machine_name, trusted.report.suite)
    return perf_history.aa_policy(TRN2_PERF, stored, trusted.machine_name, trusted.stack_id) or TRN2_PERF


def performance_check(args, trusted_python: Path, candidate_python: Path, out: Path, candidate_extra: list[str],
                      selection: list[str]) -> PerformanceCheck:
    """The interleaved performance sessions of both stacks, their verdict and the stored
    history's comparison, with the page's section; the trusted sessions are stored in the history."""
    if args.performance_launches <= 0:
        return NOT_ASKED  # asking for no launches is the user's explicit acceptance of a page without figures
    rehearsal = rehearsal_options(selection)
    run = lambda pairs, start: perf_launch.interleaved(
        trusted_python, candidate_python, out / "perf", pairs, tier=args.tier, trusted_extra=rehearsal,
        candidate_extra=rehearsal + candidate_extra, cwd=REPO, say=say, start=start)
    launches = run(args.performance_launches, 0)
    policy = performance_policy(args, launches)
    verdict = perf_compare.judge(launches, policy, accepted=args.accept_performance)
    # INCONCLUSIVE from noise adds pairs to the same series (never starts over) up to the cap
    while verdict.more_launches_could_decide and len(launches) // 2 < args.performance_max_launches:
        say(f"upgrade: performance INCONCLUSIVE after {len(launches) // 2} launches a side: one more pair")
        launches += run(1, len(launches) // 2)
        verdict = perf_compare.judge(launches, policy, accepted=args.accept_performance)
    say(f"upgrade: performance {verdict.label}" + "".join(f"; {c.figure} {c.change()}" for c in verdict.comparisons))
    warm = []
    if args.tier in perf_launch.COMPILE_CACHE_TIERS:  # each stack's first step again, on its first launch's cache
        for side, python, extra in (("trusted", trusted_python, rehearsal),
                                    ("candidate", candidate_python, rehearsal + candidate_extra)):
            first = next(l for l in launches if l.stack == side)
            say(f"upgrade: performance: a {side} session on its first launch's compile cache (warm)")
            warm.append(perf_launch.warm_session(first, python, args.tier, extra, cwd=REPO))
    history, figures = perf_history.history_lines(args.history, launches, policy, out, f"upgrade check {out.name}")
    return PerformanceCheck(verdict, tuple(perf_page.render(verdict, policy, launches, warm=warm) + history),
                            policy, figures)
