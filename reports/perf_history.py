"""The stored performance history: every performance session of a trusted stack, kept per
machine and stack (``reports/history/<machine>/<stack id>.json``, committed like the
baselines), read by the gate (``reports.gate``) and the upgrade check (``upgrades.perf_history``,
which also records and draws it).

pyperf's JSON (one benchmark's values per run, with metadata) would nearly fit, but writing
and reading it needs pyperf, which a Neuron environment does not hold and cannot get offline
(``scripts/install-trn2.sh`` installs the suite ``--no-deps``); asv's results are keyed by one
project's commit, while a stack here is a set of package versions. So the format is this
module's, plain JSON, one entry per session, its fields named in ``Entry``.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fixtures.oracles.performance_record import RankRecord
from reports.session_report import MachineRecord, SuiteIdentity

HISTORY = Path(__file__).resolve().parent / "history"
FORMAT = "qwen3-trn-conformance performance history, 1"


class HistoryFormatError(ValueError):
    """A file in the history folder that is not a performance history file of this format."""


@dataclass(frozen=True)
class MachineLoadFigures:
    """CPU time of the whole machine around one session (``upgrades.perf_compare.MachineLoad``):
    the fractions of it other processes used and the hypervisor stole."""

    wall_s: float = 0.0
    others_fraction: float = 0.0
    steal_fraction: float = 0.0
    loadavg_1m_end: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, float] | None) -> MachineLoadFigures | None:
        if data is None:
            return None
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def to_json(self) -> Mapping[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Entry:
    """One performance session of one stack on one machine."""

    stack: str  # the session's stack id (its tier's)
    recorded_at: str  # when the session ended (ISO 8601)
    session: str  # the session's id (its report folder's name where it has none)
    source: str  # what ran it: "upgrade check <folder>", "add", "record"
    step_time_s: float  # the launch's step time: its slowest rank's median steady step
    slowest_rank: str
    rank_step_time_s: Mapping[str, float]  # every rank's median steady step
    peak_memory_gib: float  # the largest rank's
    tokens_per_step: float  # all ranks together
    machine_load: MachineLoadFigures | None = None
    suite: SuiteIdentity | None = None  # the suite's identity (reports.identity.suite_identity): another measured other things

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        return cls(stack=data["stack"], recorded_at=data["recorded_at"], session=data["session"],
                   source=data["source"], step_time_s=data["step_time_s"], slowest_rank=data["slowest_rank"],
                   rank_step_time_s=dict(data["rank_step_time_s"]), peak_memory_gib=data["peak_memory_gib"],
                   tokens_per_step=data["tokens_per_step"],
                   machine_load=MachineLoadFigures.from_json(data.get("machine_load")),
                   suite=SuiteIdentity.from_json(data.get("suite")))

    def to_json(self) -> Mapping[str, Any]:
        return {"stack": self.stack, "recorded_at": self.recorded_at, "session": self.session, "source": self.source,
                "step_time_s": self.step_time_s, "slowest_rank": self.slowest_rank,
                "rank_step_time_s": dict(self.rank_step_time_s), "peak_memory_gib": self.peak_memory_gib,
                "tokens_per_step": self.tokens_per_step,
                "machine_load": self.machine_load.to_json() if self.machine_load else None,
                "suite": self.suite.to_json() if self.suite else None}


@dataclass(frozen=True)
class StackHistory:
    """One file of the history: every stored session of one stack on one machine, in the order
    stored."""

    machine: MachineRecord
    stack: str
    sessions: tuple[Entry, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path | str = "") -> StackHistory:
        if data.get("format") != FORMAT:
            raise HistoryFormatError(f"{path}: not a performance history file ({data.get('format')!r})")
        return cls(machine=MachineRecord.from_json(data["machine"]), stack=data["stack"],
                   sessions=tuple(Entry.from_json(s) for s in data["sessions"]))

    def to_json(self) -> Mapping[str, Any]:
        return {"format": FORMAT, "machine": self.machine.to_json(), "stack": self.stack,
                "sessions": [s.to_json() for s in self.sessions]}

    @classmethod
    def read(cls, path: Path) -> StackHistory:
        return cls.from_json(json.loads(path.read_text()), path)


def machine_folder(name: str) -> str:
    """A machine's name as a folder name."""
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", name).strip("_")


def store(root: Path, machine: MachineRecord, entry: Entry) -> bool:
    """Add ``entry`` under its machine and stack; False where that session is stored already."""
    path = root / machine_folder(machine.name) / f"{entry.stack}.json"
    stored = StackHistory.read(path) if path.is_file() else StackHistory(machine, entry.stack)
    if any(s.session == entry.session for s in stored.sessions):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(StackHistory(stored.machine, stored.stack, (*stored.sessions, entry)).to_json(),
                               indent=1) + "\n")
    return True


def load(root: Path, machine: str, suite: SuiteIdentity | None = None) -> Mapping[str, list[Entry]]:
    """Every stored session on ``machine`` (of ``suite`` only, where given: a session of another
    suite measured other models and data), by stack, each stack's in time order; stacks in the
    order of their first session."""
    folder = root / machine_folder(machine)
    stacks = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        stored = StackHistory.read(path)
        entries = [e for e in stored.sessions if suite is None or _same_suite(e.suite, suite)]
        if entries:
            stacks[stored.stack] = sorted(entries, key=lambda e: e.recorded_at)
    return dict(sorted(stacks.items(), key=lambda item: item[1][0].recorded_at if item[1] else ""))


SUITE_FIELDS = ("assets_recipe", "assets_files")


def _same_suite(a: SuiteIdentity | None, b: SuiteIdentity) -> bool:
    return a is not None and all(getattr(a, f) == getattr(b, f) for f in SUITE_FIELDS)


def oldest_and_latest(stored: Mapping[str, list[Entry]], least: int = 1) -> list[tuple[str, str]]:
    """``[("oldest", stack), ("latest", stack)]`` of the stacks with at least ``least``
    sessions (one pair where they are the same stack; none where no stack has that many)."""
    names = [s for s, entries in stored.items() if len(entries) >= least]
    if not names:
        return []
    return [("oldest", names[0])] + ([("latest", names[-1])] if names[-1] != names[0] else [])


def launch_step_time(ranks: Mapping[str, RankRecord]) -> tuple[str, float] | None:
    """A launch's step time from its ranks' recorded figures: the slowest rank's median steady
    step (in synchronous training every step waits for it), with that rank."""
    timed = {r: statistics.median(f.steady_times) for r, f in ranks.items() if f.steady_times}
    if not timed:
        return None
    rank = max(sorted(timed), key=lambda r: timed[r])
    return rank, timed[rank]


def against_stored(stored: Mapping[str, list[Entry]], step_time_s: float, peak_gib: float) -> list[str]:
    """One session against the oldest and the latest stored stack of its machine: the ratio to
    each stack's median session, as information (one launch against sessions of other times)."""
    lines = []
    for role, stack in oldest_and_latest(stored):
        entries = stored[stack]
        step = step_time_s / statistics.median(e.step_time_s for e in entries) - 1
        peak = peak_gib / statistics.median(e.peak_memory_gib for e in entries) - 1
        lines.append(f"against the {role} stored stack on this machine, {stack} ({len(entries)} sessions, "
                     f"{entries[0].recorded_at[:10]} to {entries[-1].recorded_at[:10]}): step time {step:+.1%}, "
                     f"peak memory {peak:+.1%} (this one launch against their median: information; the upgrade "
                     "check's launches judge)")
    return lines
