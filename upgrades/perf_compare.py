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

import json
import os
import resource
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import psutil

from fixtures.oracles import performance
from reports import perf_history

PERF_CONTRACT = "test_performance.py::test_steady_state_is_reached_and_measured"
LEAK_CONTRACT = "test_performance.py::test_device_memory_does_not_grow_in_steady_state"


@dataclass
class Launch:
    """One performance session of one stack: its report folder and the run's figures."""

    stack: str  # "trusted" or "candidate"
    report_dir: Path
    figures: dict | None  # the contract's measured.performance, None when it did not run
    outcome: str
    leak_outcome: str | None = None
    machine_load: dict | None = None  # MachineLoad.during's figures, where the session was watched
    report: dict | None = None  # the session's report.json

    @property
    def machine_name(self) -> str:
        """What the figures belong to (``reports.plugin.machine``: the host, and on trn2 the
        instance type, LNC and cores)."""
        return ((self.report or {}).get("machine") or {}).get("name", "an unrecorded machine")

    @property
    def stack_id(self) -> str:
        report = self.report or {}
        ids = report.get("stack_id") or {}
        return "+".join(ids[t] for t in report.get("platforms", []) if t in ids) or "an unrecorded stack"

    @property
    def slowest_rank(self) -> str | None:
        """The rank whose median steady step is longest: in synchronous training every step
        waits for it, so it is the launch's step time (rank 0 alone hid a slow rank)."""
        slowest = perf_history.launch_step_time((self.figures or {}).get("ranks") or {})
        return slowest[0] if slowest else None

    @property
    def steady_times(self) -> tuple[float, ...]:
        rank = self.slowest_rank
        return tuple(self.figures["ranks"][rank]["steady_times"]) if rank is not None else ()

    @property
    def first_step_s(self) -> float:
        """The slowest rank's first step (on trn2 the compile: every rank waits for it)."""
        return max(r["first_step_s"] for r in self.figures["ranks"].values())

    @property
    def compile_cache(self) -> dict | None:
        """The run's compile-cache events (``fixtures.runs.result.compile_cache_events``), None
        where it compiled nothing (cpu)."""
        return (self.figures or {}).get("compile_cache")

    @property
    def cache_state(self) -> str | None:
        """What the run's log shows of its compile cache: "cold" (it compiled, and every hit can
        be another of its ranks reusing what one rank compiled: the ranks of a launch compile
        the same programs, one at a time per cache entry, so R ranks log one miss and R-1 hits
        per program), "warm" (no compile, only hits), "mixed" (more hits than its own ranks
        explain: some programs were in the cache before), or None (no cache events)."""
        events = self.compile_cache or {}
        compiled, cached = events.get("compiled", 0), events.get("cached", 0) + events.get("cached_failure", 0)
        ranks = len((self.figures or {}).get("ranks") or {}) or 1
        if not compiled and not cached:
            return None
        return "warm" if not compiled else "cold" if cached <= compiled * (ranks - 1) else "mixed"

    @property
    def tokens_per_step(self) -> float:
        """The tokens one step of the run processed, all ranks together."""
        return sum(r["tokens_per_step"] for r in self.figures["ranks"].values())

    @property
    def peak_gib(self) -> float:
        return max(r["peak_memory_gib"] for r in self.figures["ranks"].values())

    @property
    def growth_mib_per_step(self) -> float:
        """The largest rank's memory growth per steady step: the allocator's allocated bytes where
        the runtime's counters were read (trn2), else the peak figure's (cpu)."""
        ranks = self.figures["ranks"].values()
        if self.counts_device_memory:
            return max(r["allocated_growth_mib_per_step"] for r in ranks)
        return max(r["memory_growth_mib_per_step"] for r in ranks)

    @property
    def growth_of(self) -> str:
        return "allocated device memory" if self.counts_device_memory else "peak memory"

    @property
    def counts_device_memory(self) -> bool:
        """Every rank has the runtime's device memory by category (trn2's driver counters)."""
        ranks = list(((self.figures or {}).get("ranks") or {}).values())
        return bool(ranks) and all(r.get("device_peak_gib") is not None for r in ranks)

    @property
    def device_peak_gib(self) -> float:
        """The largest rank's total device memory where the runtime counts it (every category)."""
        return max(r["device_peak_gib"] for r in self.figures["ranks"].values())

    @property
    def device_categories_gib(self) -> dict[str, float]:
        """Each category's largest bytes over the ranks (GiB)."""
        out: dict[str, float] = {}
        for r in self.figures["ranks"].values():
            for name, value in (r.get("device_categories_gib") or {}).items():
                out[name] = max(out.get(name, 0.0), value)
        return out

    @property
    def device_headroom_gib(self) -> float | None:
        """The smallest rank's headroom: its core's capacity minus the runtime's total."""
        rooms = [r["device_headroom_gib"] for r in self.figures["ranks"].values() if "device_headroom_gib" in r]
        return min(rooms) if rooms else None


def read_launch(stack: str, report_dir: Path) -> Launch:
    """The performance figures a session left in its ``report.json``."""
    path = report_dir / "report.json"
    if not path.is_file():
        return Launch(stack, report_dir, None, "no report")
    report = json.loads(path.read_text())
    figures, outcome, leak = None, "not collected", None
    for contract in report.get("contracts", []):
        if PERF_CONTRACT in contract["nodeid"]:
            outcome = contract["outcome"]
            raw = (contract.get("measured") or {}).get("performance")
            figures = json.loads(raw) if raw else None
        elif LEAK_CONTRACT in contract["nodeid"]:
            leak = contract["outcome"]
    return Launch(stack, report_dir, figures, outcome, leak, report=report)


# A session's own processes may use every core; beyond that, CPU time taken by other processes
# (or stolen by the hypervisor) above these fractions of the machine makes its step times
# another machine's: the verdict is INCONCLUSIVE, never SLOWER or PASS on them.
BUSY_OTHERS = 0.10
BUSY_STEAL = 0.05


class MachineLoad:
    """CPU time of the whole machine, of this process's children (the session) and stolen,
    around one session: what else ran while it was timed."""

    def __init__(self):
        self.cpu, self.children = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
        self.start = time.monotonic()

    def during(self) -> dict:
        after, children = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic() - self.start
        capacity = max(wall, 1e-9) * (psutil.cpu_count() or 1)
        busy = lambda t: sum(getattr(t, f) for f in ("user", "system", "nice", "irq", "softirq") if hasattr(t, f))
        own = (children.ru_utime - self.children.ru_utime) + (children.ru_stime - self.children.ru_stime)
        steal = getattr(after, "steal", 0.0) - getattr(self.cpu, "steal", 0.0)
        return {"wall_s": round(wall, 1),
                "others_fraction": round(max(busy(after) - busy(self.cpu) - own, 0.0) / capacity, 3),
                "steal_fraction": round(steal / capacity, 3), "loadavg_1m_end": round(os.getloadavg()[0], 2)}


def busy(launch: Launch) -> str | None:
    """Why a launch's machine was busy (others' CPU time, or steal), or None."""
    load = launch.machine_load or {}
    if load.get("others_fraction", 0) > BUSY_OTHERS:
        return (f"{launch.stack} session {launch.report_dir.name}: other processes used "
                f"{load['others_fraction']:.0%} of the machine's CPU time (bound {BUSY_OTHERS:.0%})")
    if load.get("steal_fraction", 0) > BUSY_STEAL:
        return (f"{launch.stack} session {launch.report_dir.name}: the hypervisor stole "
                f"{load['steal_fraction']:.0%} of the CPU time (bound {BUSY_STEAL:.0%})")
    return None


# Each trn2 session compiles into a compile cache of its own (a new folder in its report folder):
# its first step is a cold compile, whatever the stacks' other sessions compiled; a warm session
# (``warm_session``) reuses one of them.
COMPILE_CACHE_TIERS = ("trn2",)


def session_command(python: Path, tier: str, report_dir: Path, extra: list[str],
                    compile_cache: Path | None = None) -> list[str]:
    """The performance session's command; on a compiling tier with the compile cache
    ``compile_cache`` (default: a new one in ``report_dir``, so its first step compiles cold)."""
    if tier in COMPILE_CACHE_TIERS:
        extra = ["--neuron-compile-cache", str(compile_cache or Path(report_dir).resolve() / "neuron-compile-cache"),
                 *extra]
    return [str(python), "-m", "pytest", "conformance/test_performance.py", "-q", "-m", f"{tier} and perf",
            "--fresh-runs", "--report-dir", str(report_dir), *extra]


def abba(index: int) -> tuple[str, str]:
    """The order of the pair of sessions ``index``: trusted first in even pairs, candidate first
    in odd ones (ABBA), so a drift of the machine over the check falls on both stacks alike."""
    return ("trusted", "candidate") if index % 2 == 0 else ("candidate", "trusted")


def run_session(stack: str, python: Path, tier: str, report_dir: Path, extra: list[str],
                cwd: Path | None = None, compile_cache: Path | None = None) -> Launch:
    """One performance session, watched (``MachineLoad``), and its figures."""
    load = MachineLoad()
    subprocess.run(session_command(python, tier, report_dir, list(extra), compile_cache), cwd=cwd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    launch = read_launch(stack, report_dir)
    launch.machine_load = load.during()
    return launch


def interleaved(trusted_python: Path, candidate_python: Path, out: Path, launches: int, tier: str = "cpu",
                trusted_extra: list[str] = (), candidate_extra: list[str] = (), cwd: Path | None = None,
                say=print, start: int = 0) -> list[Launch]:
    """``launches`` pairs of sessions, one of each stack per pair in ABBA order, numbered from
    ``start + 1`` (an inconclusive check adds pairs to the same series)."""
    done = []
    pythons = {"trusted": (trusted_python, trusted_extra), "candidate": (candidate_python, candidate_extra)}
    for index in range(start, start + launches):
        for stack in abba(index):
            python, extra = pythons[stack]
            say(f"performance: {stack} session {index + 1} (of {start + launches} so far)")
            done.append(run_session(stack, python, tier, out / f"{stack}-{index + 1}", list(extra), cwd))
    return done


def warm_session(cold: Launch, python: Path, tier: str, extra: list[str] = (), cwd: Path | None = None) -> Launch:
    """One more session of ``cold``'s stack on ``cold``'s compile cache, so that its first step
    reuses every NEFF that launch compiled (a warm cache): the first step without the compile.
    A launch of its own: a second run inside the cold launch would share its process start-up
    and page cache, and the contract measures one run per session. Not judged (one launch a
    stack); the page shows it beside the cold ones (``render``'s ``warm``)."""
    cache = cold.report_dir.resolve() / "neuron-compile-cache"
    return run_session(cold.stack, python, tier, cold.report_dir.with_name(f"{cold.report_dir.name}-warm"),
                       list(extra), cwd, compile_cache=cache)


class Finding(StrEnum):
    """One word of a performance verdict; a verdict is PASS, NOT MEASURED, or its findings
    joined with "+" in this order (LARGER+INCONCLUSIVE: memory flagged, step time undecided)."""

    PASS = "PASS"
    SLOWER = "SLOWER"
    SLOWER_COMPILE = "SLOWER COMPILE"  # the first step on a cold compile cache
    LARGER = "LARGER"
    LEAKING = "LEAKING"
    INCONCLUSIVE = "INCONCLUSIVE"
    NOT_MEASURED = "NOT MEASURED"
    FIGURES_ONLY = "FIGURES ONLY"  # the tier's thresholds are not measured on this host type: no verdict


@dataclass
class Verdict:
    findings: tuple[Finding, ...]
    comparisons: list[performance.Comparison] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    accepted: bool = False
    step_judged: bool = True  # False where a busy machine or another amount of work per step leaves step time undecided
    compile_notes: list[str] = field(default_factory=list)  # why the first step was not judged, where it compiled

    @property
    def verdict(self) -> str:
        return "+".join(self.findings)

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

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "findings": list(self.findings), "passed": self.passed, "accepted": self.accepted,
                "comparisons": [c.to_json() for c in self.comparisons], "leaks": self.leaks,
                "problems": self.problems, "step_judged": self.step_judged, "compile_notes": self.compile_notes}


def measurement_problems(launches: list[Launch], paired: bool = True) -> list[str]:
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
        problems += [f"{where}: {line}" for line in performance.unmeasured((l.figures or {}).get("ranks") or {})]
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


def work_changed(launches: list[Launch]) -> str | None:
    """Why the two stacks' steps are not the same work (tokens per step differ), or None: step
    times of different work are not comparable, so step time is then not judged."""
    tokens = {s: sorted({round(l.tokens_per_step) for l in launches if l.stack == s}) for s in ("trusted", "candidate")}
    low, high = min(tokens["trusted"] + tokens["candidate"]), max(tokens["trusted"] + tokens["candidate"])
    if high - low <= performance.TOKENS_RTOL * high:
        return None
    return (f"another amount of work per step: the trusted stack's steps processed {tokens['trusted']} tokens, "
            f"the candidate's {tokens['candidate']} (all ranks; a changed batch, packing or sequence length): "
            "their step times measure different work")


def judge(launches: list[Launch], policy: performance.PerfPolicy, accepted: bool = False) -> Verdict:
    """The performance verdict of interleaved launches (PASS, SLOWER, SLOWER COMPILE, LARGER,
    LEAKING, INCONCLUSIVE), by ``policy``'s thresholds; NOT
    MEASURED (``measurement_problems``) whenever a launch measured nothing a verdict can rest on.
    Only a regression or INCONCLUSIVE can be accepted; NOT MEASURED can too, but stays named."""
    problems = measurement_problems(launches)
    if problems:
        return Verdict((Finding.NOT_MEASURED,), problems=problems, accepted=accepted)
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
        return Verdict((Finding.FIGURES_ONLY,), [step, *others], leaks, [], step_judged=False,
                       compile_notes=compile_notes)
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
    return Verdict(tuple(words) or (Finding.PASS,), [step, *others], leaks, unjudged,
                   accepted=bool(words) and accepted, step_judged=step_judged, compile_notes=compile_notes)


def compile_comparison(measured: dict[str, list[Launch]], policy: performance.PerfPolicy
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
                f"({l.compile_cache or 'no cache events in its log'})" for l in launches if l.cache_state != "cold"]
    if not_cold:
        return None, [f"first step not judged: {line}" for line in not_cold]
    return performance.compare_peaks([l.first_step_s for l in measured["trusted"]],
                                     [l.first_step_s for l in measured["candidate"]],
                                     policy.compile_slower_than, figure="first_step_s"), []


def leaking(trusted: list[Launch], candidate: list[Launch], bound: float) -> list[str]:
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


def render(verdict: Verdict, policy: performance.PerfPolicy, launches: list[Launch],
           warm: list[Launch] = ()) -> list[str]:
    """The upgrade page's performance section (``warm``: sessions on an earlier launch's
    compile cache, ``warm_session``, shown beside the cold first steps)."""
    head = f"## Performance: {verdict.verdict}"
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
    lines += first_step_lines(launches, list(warm))
    lines += [f"- {note}" for note in verdict.compile_notes]
    lines += [f"- leak: {leak}" for leak in verdict.leaks]
    lines += [f"- {'not measured: ' if Finding.NOT_MEASURED in verdict.findings else 'step time not judged, '}{p}"
              for p in verdict.problems]
    lines += ["", "Each session's step time (the median of its slowest rank's steady steps), in launch order:", "",
              "| session | stack | slowest rank | median step s | tokens per step | others' CPU | steal |",
              "|---|---|---|---|---|---|---|"]
    for l in launches:
        median = f"{statistics.median(l.steady_times):.4f}" if l.steady_times else "-"
        load = l.machine_load or {}
        tokens = f"{l.tokens_per_step:.0f}" if l.figures else "-"
        lines.append(f"| `perf/{l.report_dir.name}` | {l.stack} | {l.slowest_rank} | {median} | {tokens} | "
                     f"{load.get('others_fraction', '-')} | {load.get('steal_fraction', '-')} |")
    lines.append("")
    return lines


def device_memory_lines(launches: list[Launch]) -> list[str]:
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
        events = l.compile_cache or {}
        lines.append(f"| `perf/{l.report_dir.name}` | {l.stack} | {l.cache_state} | {l.first_step_s:.3f} | "
                     f"{events.get('compiled', 0)} | {events.get('cached', 0)} |")
    return lines + [""]
