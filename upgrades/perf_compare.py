"""Performance of a candidate stack against the trusted one, measured side by side.

The performance session (``pytest conformance/test_performance.py -m "<tier> and perf"
--fresh-runs``) is launched alternately in the trusted and the candidate environment
(trusted, candidate, trusted, candidate, ...), so that drift of the machine falls on both
alike. Each session's ``report.json`` holds the run's figures per rank
(``measured.performance``, from ``fixtures.oracles.performance``); the steady steps of every launch
feed the noise model there. The verdict is PASS, SLOWER, LARGER or LEAKING, with the figure,
its interval and the sessions; a regression fails the upgrade unless the user accepts it
(``--accept-performance``), and the page says so. On trn2 the memory compared is also the
runtime's device total (every category of the driver's per-core counters), LEAKING is growth
beyond the trusted stack's, and each session compiles into a new compile cache, so its first
step is a cold compile, compared as SLOWER COMPILE (``compile_comparison``).

pytest-benchmark's stored runs and ``--benchmark-compare-fail`` were considered: they time a
function called in one process, while this figure is a step of a real multi-process torchrun
launch that torchtitan itself times, and the comparison needs the two-level (launch, step)
spread of interleaved launches, which it does not model.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fixtures.oracles import performance
from reports.perf_history import MachineLoadFigures
from upgrades.perf_launch import Launch
from upgrades.verdict import Finding, label as findings_label


# A session's own processes may use every core; beyond that, CPU time taken by other processes
# (or stolen by the hypervisor) above these fractions of the machine makes its step times
# another machine's: the verdict is INCONCLUSIVE, never SLOWER or PASS on them.
BUSY_OTHERS = 0.10
BUSY_STEAL = 0.05


def busy(launch: Launch) -> str | None:
    """Why a launch's machine was busy (others' CPU time, or steal), or None."""
    load = launch.machine_load or MachineLoadFigures()
    if load.others_fraction > BUSY_OTHERS:
        return (f"{launch.stack} session {launch.report_dir.name}: other processes used "
                f"{load.others_fraction:.0%} of the machine's CPU time (bound {BUSY_OTHERS:.0%})")
    if load.steal_fraction > BUSY_STEAL:
        return (f"{launch.stack} session {launch.report_dir.name}: the hypervisor stole "
                f"{load.steal_fraction:.0%} of the CPU time (bound {BUSY_STEAL:.0%})")
    return None


@dataclass(frozen=True)
class Verdict:
    """The performance verdict of an upgrade check: its findings, the comparisons they rest
    on, the leaks, and what left a figure unmeasured or step time unjudged."""

    findings: tuple[Finding, ...]
    comparisons: tuple[performance.Comparison, ...] = ()
    leaks: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    accepted: bool = False
    step_judged: bool = True  # False where a busy machine or another amount of work per step leaves step time undecided
    compile_notes: tuple[str, ...] = ()  # why the first step was not judged, where it compiled

    @property
    def label(self) -> str:
        """The findings as the pages write them ("LARGER+INCONCLUSIVE")."""
        return findings_label(self.findings)

    @property
    def passed(self) -> bool:
        """PASS, or FIGURES ONLY (a tier without measured thresholds gives no verdict to fail:
        the upgrade verdict names it), or a finding the user accepted."""
        return self.findings in ((Finding.PASS,), (Finding.FIGURES_ONLY,)) or self.accepted

    @property
    def more_launches_could_decide(self) -> bool:
        """INCONCLUSIVE from noise alone: another pair of launches may narrow the interval. Not
        when step time is not judged: a busy session and another amount of work per step stay
        in the series, whatever is added to it."""
        return self.findings == (Finding.INCONCLUSIVE,) and self.step_judged

    def to_json(self) -> Mapping[str, Any]:
        return {"verdict": self.label, "findings": list(self.findings), "passed": self.passed,
                "accepted": self.accepted, "comparisons": [c.to_json() for c in self.comparisons],
                "leaks": list(self.leaks), "problems": list(self.problems), "step_judged": self.step_judged,
                "compile_notes": list(self.compile_notes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(findings=tuple(Finding(f) for f in data["findings"]),
                   comparisons=tuple(performance.Comparison.from_json(c) for c in data.get("comparisons") or ()),
                   leaks=tuple(data.get("leaks") or ()), problems=tuple(data.get("problems") or ()),
                   accepted=data.get("accepted", False), step_judged=data.get("step_judged", True),
                   compile_notes=tuple(data.get("compile_notes") or ()))


def measurement_problems(launches: Sequence[Launch], paired: bool = True) -> list[str]:
    """Why these launches measured nothing a verdict can rest on (empty: they did). A launch
    whose performance contract did not pass, a figure missing, non-finite or not positive
    (a renamed torchtitan metric logs nothing; a backend without memory statistics logs -1),
    and stacks with unequal launch counts (a comparison of 1 launch against 3 is not the
    interleaved design) each make the verdict NOT MEASURED, never PASS."""
    problems = []
    for l in launches:
        where = f"{l.stack} session {l.report_dir.name}"
        if l.outcome != "passed":
            problems.append(f"{where}: the performance contract {l.outcome}")
        problems += [f"{where}: {line}" for line in performance.unmeasured(l.ranks)]
    if not paired:  # one stack's sessions (the history's)
        return problems
    counted = {l.counts_device_memory for l in launches if l.figures}
    if len(counted) > 1:
        problems.append("the runtime's device memory was counted in some launches, not in others: "
                        + ", ".join(f"{l.stack} {l.report_dir.name}" for l in launches
                                    if l.figures and not l.counts_device_memory) + " lack it")
    counts = {s: sum(l.stack == s for l in launches) for s in ("trusted", "candidate")}
    if counts["trusted"] != counts["candidate"]:
        problems.append(f"unequal launch counts: {counts['trusted']} trusted against {counts['candidate']} "
                        "candidate sessions (the interleaved design compares equal numbers)")
    if not counts["trusted"] or not counts["candidate"]:
        problems.append("no launch of one of the stacks")
    return problems


def work_changed(launches: Sequence[Launch]) -> str | None:
    """Why the two stacks' steps are not the same work (tokens per step differ), or None: step
    times of different work are not comparable, so step time is then not judged."""
    tokens = {s: sorted({round(l.tokens_per_step) for l in launches if l.stack == s}) for s in ("trusted", "candidate")}
    low, high = min(tokens["trusted"] + tokens["candidate"]), max(tokens["trusted"] + tokens["candidate"])
    if high - low <= performance.TOKENS_RTOL * high:
        return None
    return (f"another amount of work per step: the trusted stack's steps processed {tokens['trusted']} tokens, "
            f"the candidate's {tokens['candidate']} (all ranks; a changed batch, packing or sequence length): "
            "their step times measure different work")


def judge(launches: Sequence[Launch], policy: performance.PerfPolicy, accepted: bool = False) -> Verdict:
    """The performance verdict of interleaved launches (PASS, SLOWER, SLOWER COMPILE, LARGER,
    LEAKING, INCONCLUSIVE), by ``policy``'s thresholds; NOT
    MEASURED (``measurement_problems``) whenever a launch measured nothing a verdict can rest on.
    Only a regression or INCONCLUSIVE can be accepted; NOT MEASURED can too, but stays named."""
    problems = measurement_problems(launches)
    if problems:
        return Verdict((Finding.NOT_MEASURED,), problems=tuple(problems), accepted=accepted)
    measured = {s: [l for l in launches if l.stack == s] for s in ("trusted", "candidate")}
    step = performance.compare_step_times([l.steady_times for l in measured["trusted"]],
                                          [l.steady_times for l in measured["candidate"]], policy.slower_than)
    peak = performance.compare_peaks([l.peak_gib for l in measured["trusted"]],
                                     [l.peak_gib for l in measured["candidate"]], policy.larger_than)
    memory = [peak]
    if all(l.counts_device_memory for l in launches):  # trn2: the runtime's total, every category
        memory.append(performance.compare_peaks([l.device_peak_gib for l in measured["trusted"]],
                                                [l.device_peak_gib for l in measured["candidate"]],
                                                policy.larger_than, figure="device_peak_gib"))
    leaks = leaking(measured["trusted"], measured["candidate"], policy.leak_mib_per_step)
    compiled, compile_notes = compile_comparison(measured, policy)
    others = memory + ([compiled] if compiled else [])
    if not policy.judged:  # thresholds not measured on this host type: the figures, no verdict
        return Verdict((Finding.FIGURES_ONLY,), (step, *others), tuple(leaks), (), step_judged=False,
                       compile_notes=tuple(compile_notes))
    busy_launches = [f"a busy machine: {why}" for l in launches if (why := busy(l))]
    changed = work_changed(launches)
    # Step times taken on a busy machine are another machine's, and those of another amount of
    # work are another run's: never SLOWER (nor PASS) on them. Memory does not depend on a busy
    # CPU: LARGER and LEAKING stand, with step time undecided.
    unjudged = busy_launches + ([changed] if changed else [])
    step_judged = not unjudged
    larger = any(c.flagged for c in memory)
    words = [w for w, bad in ((Finding.SLOWER, step_judged and step.flagged),
                              (Finding.SLOWER_COMPILE, bool(compiled and compiled.flagged)), (Finding.LARGER, larger),
                              (Finding.LEAKING, bool(leaks))) if bad]
    undecided = ((not step_judged or step.inconclusive or any(c.inconclusive for c in others))
                 and not (words and step_judged))
    if undecided:
        words.append(Finding.INCONCLUSIVE)
    return Verdict(tuple(words) or (Finding.PASS,), (step, *others), tuple(leaks), tuple(unjudged),
                   accepted=bool(words) and accepted, step_judged=step_judged, compile_notes=tuple(compile_notes))


def compile_comparison(measured: Mapping[str, list[Launch]], policy: performance.PerfPolicy
                       ) -> tuple[performance.Comparison | None, list[str]]:
    """The first step on a cold compile cache (the compile), trusted against candidate, one
    value per launch (``compare_peaks``' rule: the ratio of medians, the extreme ratios of any
    two launches), flagged beyond ``policy.compile_slower_than``; with why it is not compared:
    nothing where no launch compiled (cpu), a note where a launch's cache was not cold (its log
    shows a hit: it did not compile, so its first step is not a compile)."""
    launches = measured["trusted"] + measured["candidate"]
    if all(l.cache_state is None for l in launches):
        return None, []
    not_cold = [f"{l.stack} session {l.report_dir.name}: its compile cache was {l.cache_state or 'not used'} "
                f"({l.compile_cache.describe() if l.compile_cache else 'no cache events in its log'})"
                for l in launches if l.cache_state != "cold"]
    if not_cold:
        return None, [f"first step not judged: {line}" for line in not_cold]
    return performance.compare_peaks([l.first_step_s for l in measured["trusted"]],
                                     [l.first_step_s for l in measured["candidate"]],
                                     policy.compile_slower_than, figure="first_step_s"), []


def leaking(trusted: Sequence[Launch], candidate: Sequence[Launch], bound: float) -> list[str]:
    """The candidate's launches whose memory grows per steady step beyond the trusted stack's
    (the median of its launches) by more than ``bound`` MiB/step: a growth both stacks share
    (an allocator's pages, a new segment) is the platform's, not the candidate's leak. The
    memory is the allocated bytes where the runtime's counters were read (trn2), else the peak."""
    reference = statistics.median([l.growth_mib_per_step for l in trusted]) if trusted else 0.0
    return [f"{l.report_dir.name}: {l.growth_of} grows {l.growth_mib_per_step:.3f} MiB per steady step, "
            f"{l.growth_mib_per_step - reference:.3f} beyond the trusted stack's {reference:.3f} "
            f"(bound {bound})" for l in candidate if l.growth_mib_per_step - reference > bound]


def inconclusive_reason(c: performance.Comparison) -> str:
    """What an inconclusive comparison actually shows: a change clear of no change whose
    interval still reaches past the threshold is a measured change of uncertain size (the
    estimate within the threshold), not noise; an interval spanning no change is noise."""
    if c.low > 1:
        return (f"{c.figure}: a real change ({c.change()}: the whole interval is beyond no change), its estimate "
                f"within the {c.threshold:.0%} threshold but its interval reaching past it: the launches cannot "
                "say whether it stays within")
    return (f"{c.figure}: {c.change()}: the interval spans no change and reaches past the {c.threshold:.0%} "
            "threshold: these launches are too noisy to say the candidate is within it")


