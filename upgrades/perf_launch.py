"""The performance sessions of an upgrade check: each one launched (``pytest
conformance/test_performance.py -m "<tier> and perf" --fresh-runs``) alternately in the trusted
and the candidate environment (ABBA), watched for other load on the machine, and read back as
a ``Launch``: the session's report and the performance contract's figures
(``fixtures.oracles.performance_record``). ``upgrades.perf_compare`` judges them.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from fixtures.oracles.performance_record import CompileCacheEvents, PerformanceRecord
from reports import perf_history
from reports.perf_history import MachineLoadFigures
from reports.session_report import SessionReport

PERF_CONTRACT = "test_performance.py::test_steady_state_is_reached_and_measured"
LEAK_CONTRACT = "test_performance.py::test_device_memory_does_not_grow_in_steady_state"


@dataclass(frozen=True)
class Launch:
    """One performance session of one stack: its report folder and the run's figures."""

    stack: str  # "trusted" or "candidate"
    report_dir: Path
    figures: PerformanceRecord | None  # the performance contract's, None when it did not run
    outcome: str
    leak_outcome: str | None = None
    machine_load: MachineLoadFigures | None = None  # MachineLoad.during's, where the session was watched
    report: SessionReport | None = None  # the session's report.json

    @property
    def ranks(self):
        """Rank -> its recorded figures (``RankRecord``); none where the contract did not run."""
        return self.figures.ranks if self.figures else {}

    @property
    def machine_name(self) -> str:
        """What the figures belong to (``reports.identity.machine``: the host, and on trn2 the
        instance type, LNC and cores)."""
        machine = self.report.machine if self.report else None
        return machine.name if machine and machine.name is not None else "an unrecorded machine"

    @property
    def stack_id(self) -> str:
        report = self.report
        ids = report.stack_id if report else {}
        return "+".join(ids[t] for t in (report.platforms if report else ()) if t in ids) or "an unrecorded stack"

    @property
    def slowest_rank(self) -> str | None:
        """The rank whose median steady step is longest: in synchronous training every step
        waits for it, so it is the launch's step time (rank 0 alone hid a slow rank)."""
        slowest = perf_history.launch_step_time(self.ranks)
        return slowest[0] if slowest else None

    @property
    def steady_times(self) -> tuple[float, ...]:
        rank = self.slowest_rank
        return tuple(self.ranks[rank].steady_times) if rank is not None else ()

    @property
    def first_step_s(self) -> float:
        """The slowest rank's first step (on trn2 the compile: every rank waits for it)."""
        return max(r.first_step_s for r in self.ranks.values())

    @property
    def compile_cache(self) -> CompileCacheEvents | None:
        """The run's compile-cache events (``fixtures.runs.result.compile_cache_events``), None
        where it compiled nothing (cpu)."""
        return self.figures.compile_cache if self.figures else None

    @property
    def cache_state(self) -> str | None:
        """What the run's log shows of its compile cache: "cold" (it compiled, and every hit can
        be another of its ranks reusing what one rank compiled: the ranks of a launch compile
        the same programs, one at a time per cache entry, so R ranks log one miss and R-1 hits
        per program), "warm" (no compile, only hits), "mixed" (more hits than its own ranks
        explain: some programs were in the cache before), or None (no cache events)."""
        events = self.compile_cache or CompileCacheEvents()
        compiled, cached = events.compiled, events.cached + events.cached_failure
        ranks = len(self.ranks) or 1
        if not compiled and not cached:
            return None
        return "warm" if not compiled else "cold" if cached <= compiled * (ranks - 1) else "mixed"

    @property
    def tokens_per_step(self) -> float:
        """The tokens one step of the run processed, all ranks together."""
        return sum(r.tokens_per_step for r in self.ranks.values())

    @property
    def peak_gib(self) -> float:
        return max(r.peak_memory_gib for r in self.ranks.values())

    @property
    def growth_mib_per_step(self) -> float:
        """The largest rank's memory growth per steady step: the allocator's allocated bytes where
        the runtime's counters were read (trn2), else the peak figure's (cpu)."""
        ranks = self.ranks.values()
        if self.counts_device_memory:
            return max(r.allocated_growth_mib_per_step for r in ranks)
        return max(r.memory_growth_mib_per_step for r in ranks)

    @property
    def growth_of(self) -> str:
        return "allocated device memory" if self.counts_device_memory else "peak memory"

    @property
    def counts_device_memory(self) -> bool:
        """Every rank has the runtime's device memory by category (trn2's driver counters)."""
        ranks = list(self.ranks.values())
        return bool(ranks) and all(r.device_peak_gib is not None for r in ranks)

    @property
    def device_peak_gib(self) -> float:
        """The largest rank's total device memory where the runtime counts it (every category)."""
        return max(r.device_peak_gib for r in self.ranks.values())

    @property
    def device_categories_gib(self) -> Mapping[str, float]:
        """Each category's largest bytes over the ranks (GiB)."""
        out = {}
        for r in self.ranks.values():
            for name, value in (r.device_categories_gib or {}).items():
                out[name] = max(out.get(name, 0.0), value)
        return out

    @property
    def device_headroom_gib(self) -> float | None:
        """The smallest rank's headroom: its core's capacity minus the runtime's total."""
        rooms = [r.device_headroom_gib for r in self.ranks.values() if r.device_headroom_gib is not None]
        return min(rooms) if rooms else None


def read_launch(stack: str, report_dir: Path) -> Launch:
    """The performance figures a session left in its ``report.json``."""
    path = report_dir / "report.json"
    if not path.is_file():
        return Launch(stack, report_dir, None, "no report")
    report = SessionReport.load(path)
    figures, outcome, leak = None, "not collected", None
    for contract in report.contracts:
        if PERF_CONTRACT in contract.nodeid:
            outcome, figures = contract.outcome, contract.performance
        elif LEAK_CONTRACT in contract.nodeid:
            leak = contract.outcome
    return Launch(stack, report_dir, figures, outcome, leak, report=report)


class MachineLoad:
    """CPU time of the whole machine, of this process's children (the session) and stolen,
    around one session: what else ran while it was timed."""

    def __init__(self):
        self.cpu, self.children = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
        self.start = time.monotonic()

    def during(self) -> MachineLoadFigures:
        after, children = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic() - self.start
        capacity = max(wall, 1e-9) * (psutil.cpu_count() or 1)
        busy = lambda t: sum(getattr(t, f) for f in ("user", "system", "nice", "irq", "softirq") if hasattr(t, f))
        own = (children.ru_utime - self.children.ru_utime) + (children.ru_stime - self.children.ru_stime)
        steal = getattr(after, "steal", 0.0) - getattr(self.cpu, "steal", 0.0)
        return MachineLoadFigures(wall_s=round(wall, 1),
                                  others_fraction=round(max(busy(after) - busy(self.cpu) - own, 0.0) / capacity, 3),
                                  steal_fraction=round(steal / capacity, 3),
                                  loadavg_1m_end=round(os.getloadavg()[0], 2))


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
    return replace(read_launch(stack, report_dir), machine_load=load.during())


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


