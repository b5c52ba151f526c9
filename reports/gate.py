"""The version-pinning gate: compare a session's report with a known-good baseline.

    python -m reports.gate BASELINE.json RUN.json

prints version drift package by package and contract changes, and exits non-zero on any
version drift of a tracked package, any contract newly failing, any contract of the
baseline missing from the run, any contract skipped where the baseline ran it, or any
contract the baseline does not have that failed. Newly passing contracts and new contracts
(with their outcome) are listed and do not fail the gate. A baseline is a committed
``report.json`` of a known-good stack (``reports/baselines/<stack id>.json``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fixtures.oracles import performance
from fixtures.oracles.performance_record import PerformanceRecord
from fixtures.session.expectations import failed_differently
from reports.cli import command_parser
from reports import perf_history
from reports.session_report import MachineRecord, SessionReport, SuiteIdentity

GOOD = {"passed", "xfailed"}  # xfailed: a known deviation behaving as recorded
BAD = {"failed", "error", "xpassed"}


@dataclass
class GateResult:
    drift: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    newly_failing: list[str] = field(default_factory=list)
    newly_passing: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    newly_skipped: list[str] = field(default_factory=list)
    new: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, outcome) not in the baseline
    incomplete: bool = False
    evidence_mismatch: str | None = None  # a rehearsal compared as trn2 evidence, or the reverse
    baseline_problem: str | None = None  # a baseline of another stack, or none committed
    baseline_stack: str | None = None
    performance: list[str] = field(default_factory=list)  # figures against the baseline's; never fail the gate
    differently: Mapping[str, str] = field(default_factory=dict)  # nodeid -> a known deviation failing otherwise
    other_suite: str | None = None  # the baseline was recorded by another suite: no figure compared
    other_machine: str | None = None  # the baseline's figures were computed on other kernel paths

    @property
    def ok(self) -> bool:
        return not (self.drift or self.newly_failing or self.missing or self.newly_skipped
                    or self.new_failing or self.incomplete or self.evidence_mismatch or self.baseline_problem)

    @property
    def new_failing(self) -> list[str]:
        return [nodeid for nodeid, outcome in self.new if outcome in BAD]

    def text(self) -> str:
        out = [f"gate: {'PASS' if self.ok else 'FAIL'}"
               + (f" (baseline of stack {self.baseline_stack})" if self.baseline_stack else "")]
        notes = (self.evidence_mismatch, self.baseline_problem,
                 "the run's report is incomplete (interrupted session)" if self.incomplete else None,
                 self.other_suite, self.other_machine)
        out += [f"  {note}" for note in notes if note]
        for name, before, after in self.drift:
            out.append(f"  version drift: {name}: {before or 'not installed'} -> {after or 'not installed'}")
        for title, ids in (("newly failing", self.newly_failing), ("missing", self.missing),
                           ("skipped where the baseline ran it", self.newly_skipped),
                           ("newly passing (not a failure)", self.newly_passing)):
            for nodeid in ids:
                out.append(f"  {title}: {nodeid}")
                if nodeid in self.differently:
                    out.append(f"    {self.differently[nodeid]}")
        for nodeid, outcome in self.new:
            out.append(f"  new contract, not in the baseline ({outcome}"
                       + (": fails the gate" if outcome in BAD else "") + f"): {nodeid}")
        if len(out) == 1 + bool(self.other_machine):
            out.append("  no version drift, no contract changes")
        out += [f"  performance: {line}" for line in self.performance]
        return "\n".join(out)


def compare(baseline: SessionReport, run: SessionReport, history_root: Path = perf_history.HISTORY) -> GateResult:
    result = GateResult(incomplete=not run.complete,
                        baseline_stack=", ".join(sorted({baseline.stack_id.get(t, "?")
                                                         for t in baseline.platforms})) or None)
    if run.rehearsal != baseline.rehearsal:
        result.evidence_mismatch = (
            "a Neuron dress rehearsal (CPU stand-ins) is not trn2 evidence and cannot be gated "
            "against a real baseline" if run.rehearsal else
            "the baseline is a Neuron dress rehearsal (CPU stand-ins), not evidence for this session")
    run_stacks = run.stacks_of_platforms()
    base_stacks = {t: baseline.stack_id.get(t) for t in run.platforms}
    if run_stacks != base_stacks:
        names = ", ".join(sorted(filter(None, run_stacks.values()))) or "?"
        result.baseline_problem = (
            f"the baseline belongs to stack {result.baseline_stack or '?'} and this session is "
            f"stack {names}: compare like with like (reports/baselines/{names}.json)")
    before, after = baseline.inventory.versions, run.inventory.versions
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            result.drift.append((name, before.get(name), after.get(name)))
    base, now = baseline.outcomes, run.outcomes
    for nodeid, was in sorted(base.items()):
        if nodeid not in now:
            result.missing.append(nodeid)
        elif was in GOOD and now[nodeid] in BAD:
            result.newly_failing.append(nodeid)
        elif was != "skipped" and now[nodeid] == "skipped":
            result.newly_skipped.append(nodeid)
        elif was in BAD and now[nodeid] in GOOD:
            result.newly_passing.append(nodeid)
    messages = {c.nodeid: c.message or "" for c in run.contracts}
    result.differently = {n: line for n in result.newly_failing if (line := failed_differently(messages.get(n, "")))}
    result.new = [(nodeid, outcome) for nodeid, outcome in sorted(now.items()) if nodeid not in base]
    result.other_suite = other_suite(baseline, run)
    result.other_machine = other_machine(baseline, run)
    result.performance = ([f"not compared: {result.other_suite}"] if result.other_suite
                          else performance_against(baseline, run)) + history_against(run, history_root)
    return result


def history_against(run: SessionReport, root: Path) -> list[str]:
    """The session's performance launch against the stored history of its machine
    (``reports.perf_history``): its oldest and latest trusted stack, so a drift over several
    releases shows where each baseline step hid it. Information, never a gate failure."""
    machine = run.machine.name if run.machine else None
    figures = next(iter(run.performance_figures.values()), None)
    ranks = figures.ranks if figures else {}
    step = perf_history.launch_step_time(ranks)
    if machine is None or step is None or performance.unmeasured(ranks):
        return []
    stored = perf_history.load(root, machine, run.suite or SuiteIdentity())  # none recorded: matches none
    if not stored:
        return [f"no stored history of this suite on {machine} in {root} (python -m upgrades.perf_history)"]
    return perf_history.against_stored(stored, step[1], max(r.peak_memory_gib for r in ranks.values()))


SUITE_FIELDS = perf_history.SUITE_FIELDS


def other_suite(baseline: SessionReport, run: SessionReport) -> str | None:
    """Why the baseline was measured by another suite (its assets and checkpoints differ, or it
    recorded none), or None. Outcomes are still compared contract by contract; figures are not."""
    before, after = baseline.suite, run.suite
    if before is None:
        return ("the baseline records no suite identity (recorded before suites had one): its figures may "
                "come from other checkpoints; re-record it (python -m reports.baseline REPORT_DIR)")
    moved = [f"{name} {getattr(before, name)} -> {getattr(after, name, None)}" for name in SUITE_FIELDS
             if getattr(before, name) != getattr(after, name, None)]
    if moved:
        return ("the baseline was recorded by another suite (" + "; ".join(moved) + "): figures are not compared "
                "across it; re-record it (python -m reports.baseline REPORT_DIR)")
    return None


def other_machine(baseline: SessionReport, run: SessionReport) -> str | None:
    """A note where the baseline's figures were computed on other kernel paths
    (``fixtures.tiers.machine``): a newly failing exactness contract may be this machine's."""
    before, after = baseline.machine or MachineRecord(), run.machine or MachineRecord()
    if before.numerics_key and before.numerics_key == after.numerics_key:
        return None
    return (f"the baseline was computed on {before.numerics_label or 'an unrecorded machine'}, this "
            f"session on {after.numerics_label or 'an unrecorded machine'}{_machine_difference(before, after)}: "
            "a contract that newly fails may be this machine's kernel paths, not the stack (the upgrade check asks "
            "the trusted stack here)")


def _machine_difference(before: MachineRecord, after: MachineRecord) -> str:
    """What differs between two machine descriptions where their labels alone would not say
    (CPU flags torch's, MKL's or oneDNN's dispatch reads: ``fixtures.tiers.machine.DISPATCH_FLAGS``)."""
    old, new = before.numerics or {}, after.numerics or {}
    if not old or not new:
        return ""
    parts = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if isinstance(a, list) or isinstance(b, list):
            gone, came = sorted(set(a or ()) - set(b or ())), sorted(set(b or ()) - set(a or ()))
            parts.append(f"{name}: " + ", ".join([*(f"{f} only in the baseline" for f in gone),
                                                    *(f"{f} only in this session" for f in came)]))
        else:
            parts.append(f"{name}: {a} -> {b}")
    return f" ({'; '.join(parts)})" if parts else ""


def _where(report: SessionReport) -> str:
    """The machine a report's figures were measured on, as the performance lines name it."""
    m = report.machine
    if m is None:
        return "an unrecorded machine (kernel paths not recorded)"
    neuron = f", Neuron {dict(m.neuron_versions)}" if m.neuron_versions else ""
    return f"{m.name or 'an unrecorded machine'} ({m.numerics_label or 'kernel paths not recorded'}{neuron})"


def performance_against(baseline: SessionReport, run: SessionReport) -> list[str]:
    """The performance figures against the baseline's: only on the same machine (an absolute
    time from another machine is not comparable, and the line says so). One launch each, so
    the interval holds the spread over steps only: informative, never a gate failure; the
    upgrade check's interleaved launches give the verdict (upgrades.perf_compare)."""
    before, after = baseline.performance_figures, run.performance_figures
    if not after:
        return []
    if not before:
        return ["the baseline has no performance figures"]
    if _where(baseline) != _where(run):
        return [f"not compared: the baseline was measured on {_where(baseline)}, this session on {_where(run)}: "
                "absolute times of two machines are not comparable"]
    lines = []
    for nodeid in sorted(set(before) & set(after)):
        line = _one_launch_each(nodeid, before[nodeid], after[nodeid])
        if line is not None:
            lines.append(line)
    return lines


def _one_launch_each(nodeid: str, before: PerformanceRecord, after: PerformanceRecord) -> str | None:
    """One performance figure against the baseline's, rank 0's (None: nothing to compare)."""
    missing = performance.unmeasured(after.ranks)
    if missing:  # the same rule as the upgrade check's: a figure that measured nothing is no figure
        return f"{nodeid}: NOT MEASURED: " + "; ".join(missing)
    b, a = before.ranks.get("0"), after.ranks.get("0")
    if not (b and a and b.steady_times and a.steady_times):
        return None
    step = performance.compare_step_times_one_launch(tuple(b.steady_times), tuple(a.steady_times))
    if b.tokens_per_step and abs(a.tokens_per_step - b.tokens_per_step) > performance.TOKENS_RTOL * b.tokens_per_step:
        return (f"{nodeid}: tokens per step {b.tokens_per_step:.0f} -> {a.tokens_per_step:.0f} "
                "(rank 0): the step does other work, so its time is not comparable")
    return (f"{nodeid}: steady step {step.change()}, peak memory {b.peak_memory_gib:.4g} -> "
            f"{a.peak_memory_gib:.4g} GiB (one launch each: the launch-to-launch noise is not in "
            "this interval; the upgrade check judges)")


BASELINES = Path(__file__).resolve().parent / "baselines"


def baseline_for(report: SessionReport) -> Path:
    """The committed baseline of the report's stack (one tier per gated session)."""
    stacks = sorted({report.stack_id[t] for t in report.platforms})
    return BASELINES / f"{stacks[0] if len(stacks) == 1 else '+'.join(stacks) or 'no-tier'}.json"


def compare_with_file(path: Path, report: SessionReport) -> GateResult:
    """``compare`` with a baseline file; a missing file is a failed gate that says so."""
    if not path.is_file():
        result = GateResult(incomplete=not report.complete)
        result.baseline_problem = (f"no committed baseline at {path}: promote a known-good session of "
                                 "this stack with `python -m reports.baseline REPORT_DIR`")
        return result
    return compare(SessionReport.load(path), report)


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("reports.gate", __doc__)
    parser.add_argument("baseline", type=Path)
    parser.add_argument("run", type=Path, help="a report.json, or the report folder holding it")
    args = parser.parse_args(argv)

    result = compare(SessionReport.load(args.baseline), SessionReport.load(args.run))
    print(result.text())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
