"""Every performance session of a trusted stack, kept per machine and stack, so a slow drift
over releases shows: a 4% loss per release passes each two-stack check and compounds to about
22% over five. The upgrade check adds its trusted sessions (``upgrades.check``), ``add``
stores sessions already run (a promoted baseline's), and ``record`` runs sessions on purpose (on trn2:
the A/A series the tier's thresholds are derived from, ``aa_policy``).

    python -m upgrades.perf_history record [--tier cpu|trn2] [--launches N] [--history DIR] [-- PYTEST ARGS]
    python -m upgrades.perf_history add REPORT_DIR [REPORT_DIR ...]    # a session already run
    python -m upgrades.perf_history show [--machine NAME]

Storage and format: ``reports.perf_history`` (the gate reads it too).
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fixtures.oracles import performance
from fixtures.tiers.tier_name import Tier
from reports import perf_history as history
from reports.perf_history import HISTORY, Entry, StackHistory, load, machine_folder
from reports.session_report import MachineRecord
from upgrades import perf_compare, perf_launch
from upgrades.perf_launch import Launch
from upgrades.stacks import REPO


def entry_of(launch: Launch, source: str) -> Entry | None:
    """A launch as a history entry; None where it measured nothing a comparison can rest on
    (``perf_compare.measurement_problems``) or its machine was busy (its step time is another
    machine's): such a session is not stored."""
    if launch.report is None or perf_compare.measurement_problems([launch], paired=False) or perf_compare.busy(launch):
        return None
    return Entry(stack=launch.stack_id, recorded_at=_iso(launch.report.finished_at),
                 session=launch.report.session or launch.report_dir.name, source=source,
                 step_time_s=statistics.median(launch.steady_times), slowest_rank=str(launch.slowest_rank),
                 rank_step_time_s={r: f.step_time_s for r, f in sorted(launch.ranks.items())},
                 peak_memory_gib=launch.peak_gib, tokens_per_step=launch.tokens_per_step,
                 machine_load=launch.machine_load, suite=launch.report.suite)


def _iso(finished_at) -> str:
    """When a session ended, as ISO 8601 in UTC: reports record it as seconds since the epoch
    (``time.time()``); now where it is missing."""
    when = datetime.fromtimestamp(finished_at, timezone.utc) if isinstance(finished_at, (int, float)) \
        else datetime.now(timezone.utc)
    return when.isoformat(timespec="seconds")


def add(root: Path, launches: Sequence[Launch], source: str) -> list[Entry]:
    """Store each storable launch under its machine and stack (``reports.perf_history``);
    returns what was stored. A session already stored is not stored twice."""
    stored = []
    for launch in launches:
        entry = entry_of(launch, source)
        if entry is not None and history.store(root, launch.report.machine or MachineRecord(name=launch.machine_name),
                                               entry):
            stored.append(entry)
    return stored


# ----------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class AgainstStored:
    """The candidate's launches against one stored stack's sessions on the same machine. Not
    interleaved (the stored sessions ran at other times), so a change beyond the threshold is
    reported as drift, never as this check's verdict."""

    role: str  # "oldest" or "latest"
    stack: str
    sessions: int
    first: str
    last: str
    step: performance.Comparison
    peak: performance.Comparison

    def to_json(self) -> Mapping[str, Any]:
        return {"role": self.role, "stack": self.stack, "sessions": self.sessions, "step": self.step.to_json(),
                "peak": self.peak.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgainstStored:
        return cls(role=data["role"], stack=data["stack"], sessions=data["sessions"], first="", last="",
                   step=performance.Comparison.from_json(data["step"]),
                   peak=performance.Comparison.from_json(data["peak"]))


@dataclass(frozen=True)
class HistoryComparison:
    """What upgrade.json keeps of the history section: the machine, the candidate against its
    oldest and latest stored stack, and how many trusted sessions the check stored."""

    machine: str
    against: tuple[AgainstStored, ...] = ()
    stored: int = 0

    def to_json(self) -> Mapping[str, Any]:
        return {"machine": self.machine, "against": [r.to_json() for r in self.against], "stored": self.stored}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryComparison | None:
        if not data:
            return None
        return cls(machine=data["machine"], against=tuple(AgainstStored.from_json(r) for r in data["against"]),
                   stored=data["stored"])


def against_history(stored: Mapping[str, list[Entry]], candidate: Sequence[Launch],
                    policy: performance.PerfPolicy) -> list[AgainstStored]:
    """The candidate against the oldest and the latest stored stack (one row when they are the
    same), each by the launch test of ``fixtures.oracles.performance`` (two sessions a side)."""
    if len(candidate) < 2:
        return []
    rows = []
    for role, stack in history.oldest_and_latest(stored, least=2):
        entries = stored[stack]
        step = performance.compare_step_times([(e.step_time_s,) for e in entries],
                                              [launch.steady_times for launch in candidate], policy.slower_than)
        peak = performance.compare_peaks([e.peak_memory_gib for e in entries], [l.peak_gib for l in candidate],
                                         policy.larger_than)
        rows.append(AgainstStored(role, stack, len(entries), entries[0].recorded_at, entries[-1].recorded_at,
                                  step, peak))
    return rows


# The rule that turns an A/A series into a tier's thresholds: the largest change any even
# split of the series into two sides shows (the noise a check of these launches can meet by
# chance), half again, and never below the tier's stake.
AA_MIN_LAUNCHES = 6
AA_MARGIN = 1.5
AA_MAX_LAUNCHES = 12  # the most recent ones; C(12, 6) = 924 splits


def largest_split_change(values: list[float]) -> float:
    """max |ratio - 1| over every split of ``values`` into two halves (ratio of their
    geometric means; for an odd count the middle value's half is the smaller)."""
    n = len(values)
    logs = [math.log(v) for v in values]
    worst = 0.0
    for side in itertools.combinations(range(n), n // 2):
        other = [i for i in range(n) if i not in side]
        ratio = math.exp(statistics.fmean(logs[i] for i in other) - statistics.fmean(logs[i] for i in side))
        worst = max(worst, abs(ratio - 1))
    return worst


def aa_policy(stake: performance.PerfPolicy, stored: Mapping[str, list[Entry]], machine: str,
              stack: str | None = None) -> performance.PerfPolicy | None:
    """The tier's thresholds from an A/A series of this machine (``record``'s sessions or the
    trusted sessions of earlier checks): of ``stack`` where it has ``AA_MIN_LAUNCHES`` sessions,
    else of the stack with the most; None where no stack has that many."""
    series = {s: e for s, e in stored.items() if len(e) >= AA_MIN_LAUNCHES}
    if not series:
        return None
    name = stack if stack in series else max(series, key=lambda s: len(series[s]))
    entries = series[name][-AA_MAX_LAUNCHES:]
    step = largest_split_change([e.step_time_s for e in entries])
    peak = largest_split_change([e.peak_memory_gib for e in entries])
    return replace(stake, slower_than=max(stake.slower_than, round(AA_MARGIN * step, 4)),
                   larger_than=max(stake.larger_than, round(AA_MARGIN * peak, 4)), judged=True,
                   why=(f"from an A/A series of {len(entries)} sessions of {name} on {machine} "
                        f"({entries[0].recorded_at[:10]} to {entries[-1].recorded_at[:10]}): the largest split "
                        f"changed step time by {step:.1%} and peak memory by {peak:.1%}; thresholds {AA_MARGIN}x "
                        f"those, at least the stakes ({stake.slower_than:.0%}, {stake.larger_than:.0%})"))


# ----------------------------------------------------------------------------- the page


def draw(stored: Mapping[str, list[Entry]], launches: Sequence[Launch], path: Path) -> Path | None:
    """Step time per session across the stored stacks, then this check's launches (trusted and
    candidate), as a PNG at ``path``; None where matplotlib cannot be imported."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=100)
    x, ticks, labels = 0, [], []
    groups = [(stack, [e.step_time_s for e in entries], "tab:blue") for stack, entries in stored.items()]
    groups += [(f"this check: {side}", [statistics.median(l.steady_times) for l in launches
                                        if l.stack == side and l.steady_times], colour)
               for side, colour in (("trusted", "tab:green"), ("candidate", "tab:red"))]
    for name, values, colour in groups:
        if not values:
            continue
        xs = list(range(x, x + len(values)))
        ax.plot(xs, values, "o", color=colour)
        ax.hlines(statistics.median(values), xs[0] - 0.3, xs[-1] + 0.3, color=colour, alpha=0.5)
        ticks.append((xs[0] + xs[-1]) / 2)
        labels.append(name)
        x += len(values) + 1
    ax.set_xticks(ticks, labels, rotation=15, ha="right", fontsize=7)
    ax.set_ylabel("median steady step (s)")
    ax.set_title("Step time per session, stored stacks on this machine and this check", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def render(rows: Sequence[AgainstStored], stored: Mapping[str, list[Entry]], machine: str, picture: Path | None,
           page_dir: Path, added: list[Entry]) -> list[str]:
    """The page's history section."""
    lines = ["### Against the stored history of this machine", "",
             f"Machine: {machine}. Stored stacks (oldest first): "
             + (", ".join(f"`{s}` ({len(e)} sessions)" for s, e in stored.items()) or "none") + ".", ""]
    if rows:
        lines += ["| candidate against | sessions | recorded | step time | peak memory | beyond the threshold |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            beyond = [c.figure for c in (r.step, r.peak) if c.flagged]
            lines.append(f"| {r.role}: `{r.stack}` | {r.sessions} | {r.first[:10]} to {r.last[:10]} | "
                         f"{r.step.change()} | {r.peak.change()} | {', '.join(beyond) or 'no'} |")
        lines += ["", "Stored sessions ran at other times, not interleaved with this check's: a change beyond the "
                      "threshold here is drift to look at, not this check's verdict (above).", ""]
    else:
        lines += ["No stored stack has two sessions on this machine yet: nothing to compare with.", ""]
    if picture is not None:
        lines += [f"![step time per session across stacks]({picture.relative_to(page_dir)})", ""]
    else:
        lines += ["(No picture: matplotlib cannot be imported here.)", ""]
    if added:
        lines += [f"This check stored {len(added)} trusted session(s) in the history.", ""]
    return lines


def history_lines(root: Path, launches: Sequence[Launch], policy: performance.PerfPolicy,
                  page_dir: Path, source: str) -> tuple[list[str], HistoryComparison | None]:
    """Compare the candidate with the stored history (before this check's sessions are added),
    then store the trusted launches; the page's lines and upgrade.json's figures."""
    machine = next((l.machine_name for l in launches if l.report is not None), None)
    if machine is None:
        return [], None
    suite = next(l.report.suite for l in launches if l.report is not None)
    stored = load(root, machine, suite)
    rows = against_history(stored, [l for l in launches if l.stack == "candidate"], policy)
    picture = draw(stored, launches, page_dir / "perf-history.png")
    added = add(root, [l for l in launches if l.stack == "trusted"], source)
    lines = render(rows, stored, machine, picture, page_dir, added)
    return lines, HistoryComparison(machine, tuple(rows), len(added))


# ----------------------------------------------------------------------------- commands


def record(python: Path, tier: Tier, launches: int, root: Path, extra: list[str], out: Path) -> int:
    """``launches`` performance sessions of the stack of ``python``, one after another, stored."""
    done = 0
    for index in range(launches):
        report_dir = out / f"record-{index + 1}"
        print(f"perf_history: session {index + 1} of {launches}", file=sys.stderr, flush=True)
        launch = perf_launch.run_session("trusted", python, tier, report_dir, extra, cwd=REPO)
        stored = add(root, [launch], "record")
        if not stored:
            problems = perf_compare.measurement_problems([launch], paired=False) + [perf_compare.busy(launch) or ""]
            print(f"perf_history: session {index + 1} not stored: {'; '.join(p for p in problems if p)}",
                  file=sys.stderr)
        done += len(stored)
    print(f"perf_history: stored {done} of {launches} sessions under {root}")
    return 0 if done == launches else 1


def show(root: Path, machine: str | None) -> int:
    folders = [root / machine_folder(machine)] if machine else sorted(p for p in root.glob("*") if p.is_dir())
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            stored = StackHistory.read(path)
            times = [s.step_time_s for s in stored.sessions]
            print(f"{stored.machine.name}: {stored.stack}: {len(times)} sessions, median step "
                  f"{statistics.median(times):.4f} s" if times else f"{path}: no session")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m upgrades.perf_history", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("record", "add", "show"))
    parser.add_argument("reports", nargs="*", type=Path, help="add: session report folders (or report.json)")
    parser.add_argument("--tier", type=Tier, default=Tier.CPU, choices=tuple(Tier))
    parser.add_argument("--launches", type=int, default=AA_MIN_LAUNCHES)
    parser.add_argument("--history", type=Path, default=HISTORY)
    parser.add_argument("--machine", default=None)
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "out" / "perf-history")
    args = parser.parse_args(argv)
    if args.command == "show":
        return show(args.history, args.machine)
    if args.command == "add":
        launches = [perf_launch.read_launch("trusted", p.parent if p.name == "report.json" else p)
                    for p in args.reports]
        stored = add(args.history, launches, "add")
        print(f"perf_history: stored {len(stored)} of {len(launches)} sessions under {args.history}")
        return 0 if len(stored) == len(launches) else 1
    return record(Path(sys.executable), args.tier, args.launches, args.history, extra, args.out)


if __name__ == "__main__":
    sys.exit(main())
