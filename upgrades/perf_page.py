"""The upgrade page's performance section: the verdict with its comparisons, why a figure
was not judged, device memory and first steps where the runtime counts them, and each session's
step time in launch order (``upgrades.perf_compare`` judges; this module only writes)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from fixtures.oracles import performance
from upgrades.perf_compare import Verdict, inconclusive_reason
from upgrades.perf_launch import Launch
from upgrades.verdict import Finding

def render(verdict: Verdict, policy: performance.PerfPolicy, launches: Sequence[Launch],
           warm: Sequence[Launch] = ()) -> list[str]:
    """The upgrade page's performance section (``warm``: sessions on an earlier launch's
    compile cache, ``warm_session``, shown beside the cold first steps)."""
    head = f"## Performance: {verdict.label}"
    if verdict.accepted:
        head += " (accepted by the user with --accept-performance: the upgrade is not blocked by it)"
    lines = [head, "",
             f"Interleaved sessions (trusted, candidate, ...): {len(launches)}. Flagged only when the whole "
             f"interval is beyond no change and the change is beyond the tier's threshold "
             f"(slower {policy.slower_than:.0%}, larger {policy.larger_than:.0%}, leak "
             f"{policy.leak_mib_per_step} MiB/step beyond the trusted stack's, first step on a cold compile "
             f"cache {policy.compile_slower_than:.0%}; {policy.why}).", ""]
    if verdict.comparisons:
        lines += ["| figure | trusted | candidate | change | flagged |", "|---|---|---|---|---|"]
        for c in verdict.comparisons:
            flag = "**yes**" if c.flagged else ("inconclusive" if c.inconclusive else "no")
            if Finding.FIGURES_ONLY in verdict.findings:
                flag = "not judged (figures only, below)"
            elif c.figure == "step_time_s" and not verdict.step_judged:
                flag = "not judged (below)"
            lines.append(f"| {c.figure} (median of {c.launches[0]}+{c.launches[1]} launches) | {c.trusted:.4g} | "
                         f"{c.candidate:.4g} | {c.change()} | {flag} |")
        lines.append("")
    if Finding.FIGURES_ONLY in verdict.findings:
        lines += [f"Not judged: {policy.why}. The figures above and each session's below are what was measured; "
                  "a verdict needs thresholds from this host type's own A/A spread: run "
                  "`python -m upgrades.perf_history record --tier trn2 --launches 8` on a quiet host of this type "
                  "with the trusted stack (it stores the series the next check derives them from).", ""]
    if Finding.NOT_MEASURED in verdict.findings:
        lines += ["These launches measured nothing a verdict can rest on (below): NOT MEASURED is never a "
                  "pass, and fails the check unless accepted with `--accept-performance`.", ""]
    if Finding.INCONCLUSIVE in verdict.findings:
        lines += [f"- {inconclusive_reason(c)}" for c in verdict.comparisons if c.inconclusive]
        lines += ["", ("Rerun with more launches (`--performance-max-launches`) on a quiet machine, or accept with "
                       if verdict.more_launches_could_decide else
                       "More launches in this series cannot decide step time (below): rerun on a quiet machine if "
                       "a session was busy, or accept with ") + "`--accept-performance`.", ""]
    lines += device_memory_lines(launches)
    lines += first_step_lines([*launches], [*warm])
    lines += [f"- {note}" for note in verdict.compile_notes]
    lines += [f"- leak: {leak}" for leak in verdict.leaks]
    lines += [f"- {'not measured: ' if Finding.NOT_MEASURED in verdict.findings else 'step time not judged, '}{p}"
              for p in verdict.problems]
    lines += ["", "Each session's step time (the median of its slowest rank's steady steps), in launch order:", "",
              "| session | stack | slowest rank | median step s | tokens per step | others' CPU | steal |",
              "|---|---|---|---|---|---|---|"]
    for l in launches:
        median = f"{statistics.median(l.steady_times):.4f}" if l.steady_times else "-"
        tokens = f"{l.tokens_per_step:.0f}" if l.figures else "-"
        others, steal = (l.machine_load.others_fraction, l.machine_load.steal_fraction) if l.machine_load else ("-", "-")
        lines.append(f"| `perf/{l.report_dir.name}` | {l.stack} | {l.slowest_rank} | {median} | {tokens} | "
                     f"{others} | {steal} |")
    lines.append("")
    return lines


def device_memory_lines(launches: Sequence[Launch]) -> list[str]:
    """Where the runtime counts device memory (trn2): each category's peak per stack (the median
    over its launches of the largest rank's) and the smallest headroom against a core's capacity."""
    counted = [l for l in launches if l.figures and l.counts_device_memory]
    if not counted:
        return []
    stacks = [s for s in ("trusted", "candidate") if any(l.stack == s for l in counted)]
    names = sorted({name for l in counted for name in l.device_categories_gib})

    def median_of(stack, value):
        values = [v for l in counted if l.stack == stack and (v := value(l)) is not None]
        return statistics.median(values) if values else None

    def mib(value):
        return "-" if value is None else f"{value * 1024:.3f}"

    lines = ["Device memory where the runtime counts it (the driver's per-core counters after a synchronize, "
             "MiB per core: the median over a stack's launches of its largest rank's):", "",
             "| category | " + " | ".join(stacks) + " |", "|---|" + "---|" * len(stacks)]
    for name in names:
        cells = [mib(median_of(s, lambda l, n=name: l.device_categories_gib.get(n, 0.0))) for s in stacks]
        if any(c not in ("-", "0.000") for c in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(mib(median_of(s, lambda l: l.device_peak_gib)) for s in stacks) + " |")
    lines.append("| headroom (core capacity minus total, smallest rank) | "
                 + " | ".join(mib(median_of(s, lambda l: l.device_headroom_gib)) for s in stacks) + " |")
    return lines + [""]


def first_step_lines(launches: list[Launch], warm: list[Launch]) -> list[str]:
    """Where the runs compile: each session's first step with its compile cache's state as its
    log shows it (cold: every compile a miss; warm: every one a hit)."""
    compiling = [l for l in launches + warm if l.figures and l.cache_state is not None]
    if not compiling:
        return []
    lines = ["First step (the compile on a cold cache; without it on a warm one), the slowest rank's:", "",
             "| session | stack | compile cache | first step s | compiled | cache hits |", "|---|---|---|---|---|---|"]
    for l in compiling:
        lines.append(f"| `perf/{l.report_dir.name}` | {l.stack} | {l.cache_state} | {l.first_step_s:.3f} | "
                     f"{l.compile_cache.compiled} | {l.compile_cache.cached} |")
    return lines + [""]
