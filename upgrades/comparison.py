"""What changed between the trusted stack's session and the candidate's (``upgrades.compare``),
as records: each contract's outcome before and after, the newly failing grouped by cause, the
figures that moved, the runs side by side. Part of ``upgrade.json`` (``upgrades.result``); the
page renders from it (``upgrades.page``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from reports.session_report import PreflightFinding
from upgrades.candidate_env import Change
from upgrades.verdict import ContractVerdict

XFAILED = "xfailed"


@dataclass(frozen=True)
class FailingDetail:
    """What explains a newly failing contract: its failure, the runs it read, its repro bundle,
    and a known deviation's recorded reason where it now fails otherwise (``differently``)."""

    message: str = ""
    runs: tuple[str, ...] = ()
    repro_bundle: str | None = None
    differently: str | None = None


@dataclass(frozen=True)
class ContractChange:
    """One contract's outcome in the baseline and in the candidate (None: absent) and its
    category (``upgrades.compare.CATEGORIES``, or "unchanged")."""

    nodeid: str
    before: str | None
    after: str | None
    category: str
    failing: FailingDetail | None = None  # newly failing (also when found to fail here too)
    expectation: str | None = None  # a known deviation's expectations line
    not_remeasured: str | None = None  # a deviation on both sides the candidate did not measure again: why
    today: str | None = None  # the trusted stack's outcome today, where it fails here too

    @property
    def holds_a_deviation(self) -> bool:
        """A known deviation on both sides (xfailed before and after)."""
        return self.category == "unchanged" and self.before == XFAILED and self.after == XFAILED

    @property
    def repro_bundle(self) -> str | None:
        return self.failing.repro_bundle if self.failing else None

    def to_json(self) -> Mapping[str, Any]:
        out = {"nodeid": self.nodeid, "before": self.before, "after": self.after, "category": self.category}
        if self.failing is not None:
            out |= {"repro_bundle": self.failing.repro_bundle, "message": self.failing.message,
                    "runs": list(self.failing.runs), "differently": self.failing.differently}
        if self.holds_a_deviation:
            out |= {"expectation": self.expectation, "not_remeasured": self.not_remeasured}
        if self.category == "upstream fixed":
            out["expectation"] = self.expectation
        if self.today is not None:
            out["today"] = self.today
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContractChange:
        failing = (FailingDetail(message=data.get("message") or "", runs=tuple(data.get("runs") or ()),
                                 repro_bundle=data.get("repro_bundle"), differently=data.get("differently"))
                   if "message" in data else None)
        return cls(nodeid=data["nodeid"], before=data["before"], after=data["after"], category=data["category"],
                   failing=failing, expectation=data.get("expectation"), not_remeasured=data.get("not_remeasured"),
                   today=data.get("today"))


@dataclass(frozen=True)
class Today:
    """A moved figure as the trusted stack measures it today (this machine, this checkout)."""

    value: Any
    stale_baseline: bool  # the committed baseline's value is not what the trusted stack measures now
    candidates_move: bool  # the candidate's value is not today's: the move is the candidate's


@dataclass(frozen=True)
class FigureChange:
    """A figure both sessions measured that moved."""

    nodeid: str
    name: str
    before: Any
    after: Any
    today: Today | None = None  # None: not re-measured today

    def to_json(self) -> Mapping[str, Any]:
        out = {"nodeid": self.nodeid, "name": self.name, "before": self.before, "after": self.after}
        if self.today is not None:
            out |= {"today": self.today.value, "stale_baseline": self.today.stale_baseline,
                    "candidates_move": self.today.candidates_move}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FigureChange:
        today = Today(data["today"], data["stale_baseline"], data["candidates_move"]) if "today" in data else None
        return cls(nodeid=data["nodeid"], name=data["name"], before=data["before"], after=data["after"], today=today)


@dataclass(frozen=True)
class FailureGroup:
    """Newly failing contracts of one cause: whose cause it is, the culprit file, and one
    representative repro bundle."""

    cause: str
    culprit: str | None
    owner: str
    contracts: tuple[str, ...]
    repro_bundle: str | None = None

    def to_json(self) -> Mapping[str, Any]:
        return {"cause": self.cause, "culprit": self.culprit, "owner": self.owner, "contracts": list(self.contracts),
                "repro_bundle": self.repro_bundle}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FailureGroup:
        return cls(cause=data["cause"], culprit=data.get("culprit"), owner=data["owner"],
                   contracts=tuple(data["contracts"]), repro_bundle=data.get("repro_bundle"))


@dataclass(frozen=True)
class RunFigures:
    """One run as rank 0 recorded it: whether it trained, its step-1 loss, its mean step time
    after the first (compilation) step, its peak memory."""

    ok: bool | None
    step1_loss: float | None
    step_time_s: float | None
    peak_memory_gib: float | None

    def to_json(self) -> Mapping[str, Any]:
        return {"ok": self.ok, "step1_loss": self.step1_loss, "step_time_s": self.step_time_s,
                "peak_memory_gib": self.peak_memory_gib}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunFigures:
        return cls(data.get("ok"), data.get("step1_loss"), data.get("step_time_s"), data.get("peak_memory_gib"))


@dataclass(frozen=True)
class RunChange:
    """A run both sessions used (by its description), before and after."""

    run: str
    before: RunFigures
    after: RunFigures

    def to_json(self) -> Mapping[str, Any]:
        return {"run": self.run, "before": self.before.to_json(), "after": self.after.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunChange:
        return cls(data["run"], RunFigures.from_json(data["before"]), RunFigures.from_json(data["after"]))


@dataclass(frozen=True)
class SessionRuns:
    """Distinct runs a session used, and how many it launched itself (the rest came from the
    run cache of an earlier session of the same stack)."""

    runs: int = 0
    launched: int = 0

    def to_json(self) -> Mapping[str, int]:
        return {"runs": self.runs, "launched": self.launched}


@dataclass(frozen=True)
class HeldDeviation:
    """A known deviation both sides fail as recorded: still holding (``why`` None) or not
    re-measured (``why``: the run the candidate's xfail came from did not train)."""

    nodeid: str
    expectation: str | None = None
    why: str | None = None


def _versions_json(versions: tuple[Change, ...]) -> list[Mapping[str, Any]]:
    return [{"name": c.name, "old": c.old, "new": c.new, "kind": c.kind, "commit": c.commit, "date": c.date,
             "source": c.source} for c in versions]


@dataclass(frozen=True)
class Comparison:
    """Everything ``upgrades.compare.compare`` finds; ``verdict`` is the contracts' side of the
    upgrade's verdict. ``baseline`` and ``candidate_report`` are the page's paths to the two
    reports (``placed``)."""

    verdict: ContractVerdict
    contracts: tuple[ContractChange, ...] = ()
    counts: Mapping[str, int] | None = None  # category -> contracts
    versions: tuple[Change, ...] = ()
    measured: tuple[FigureChange, ...] = ()
    unchanged_figures: tuple[str, ...] = ()
    figures_compared: int = 0
    groups: tuple[FailureGroup, ...] = ()
    still_holding: tuple[HeldDeviation, ...] = ()
    not_remeasured: tuple[HeldDeviation, ...] = ()
    runs: tuple[RunChange, ...] = ()
    baseline_runs: SessionRuns = SessionRuns()
    candidate_runs: SessionRuns = SessionRuns()
    pip_check: tuple[str, ...] = ()
    stack_preflight: tuple[PreflightFinding, ...] = ()
    baseline_session: str | None = None
    today_session: str | None = None
    figures_remeasured_today: int = 0
    other_suite: str | None = None  # why no figure was compared: the baseline's suite measured other things
    baseline_stack: Mapping[str, str] | None = None
    candidate_stack: Mapping[str, str] | None = None
    baseline: str | None = None
    candidate_report: str | None = None

    def placed(self, baseline: str, candidate_report: str) -> Comparison:
        """The comparison as its page in the check's folder names things: the repro bundles under
        the candidate's report folder, the baseline by its path from the page."""
        def moved(bundle: str | None) -> str | None:
            return f"{candidate_report}/{bundle}" if bundle else bundle

        contracts = tuple(replace(c, failing=replace(c.failing, repro_bundle=moved(c.failing.repro_bundle)))
                          if c.failing else c for c in self.contracts)
        groups = tuple(replace(g, repro_bundle=moved(g.repro_bundle)) for g in self.groups)
        return replace(self, contracts=contracts, groups=groups, baseline=baseline, candidate_report=candidate_report)

    def to_json(self) -> Mapping[str, Any]:
        out = {
            "verdict": self.verdict.text(), "contract_verdict": self.verdict.to_json(), "passed": self.verdict.passed,
            "baseline_session": self.baseline_session, "today_session": self.today_session,
            "figures_remeasured_today": self.figures_remeasured_today, "other_suite": self.other_suite,
            "baseline_stack": self.baseline_stack, "candidate_stack": self.candidate_stack,
            "versions": _versions_json(self.versions), "contracts": [c.to_json() for c in self.contracts],
            "counts": dict(self.counts or {}), "measured": [m.to_json() for m in self.measured],
            "unchanged_figures": list(self.unchanged_figures), "figures_compared": self.figures_compared,
            "groups": [g.to_json() for g in self.groups],
            "still_holding": [{"nodeid": d.nodeid, "expectation": d.expectation} for d in self.still_holding],
            "not_remeasured": [{"nodeid": d.nodeid, "why": d.why} for d in self.not_remeasured],
            "runs": [r.to_json() for r in self.runs],
            "launches": {"baseline": self.baseline_runs.to_json(), "candidate": self.candidate_runs.to_json()},
            "pip_check": list(self.pip_check), "stack_preflight": [f.to_json() for f in self.stack_preflight]}
        if self.baseline is not None:
            out |= {"baseline": self.baseline, "candidate_report": self.candidate_report}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        launches = data.get("launches") or {}
        return cls(
            verdict=ContractVerdict.from_json(data["contract_verdict"]),
            contracts=tuple(ContractChange.from_json(c) for c in data.get("contracts") or ()),
            counts=dict(data.get("counts") or {}), versions=tuple(Change(**v) for v in data.get("versions") or ()),
            measured=tuple(FigureChange.from_json(m) for m in data.get("measured") or ()),
            unchanged_figures=tuple(data.get("unchanged_figures") or ()),
            figures_compared=data.get("figures_compared", 0),
            groups=tuple(FailureGroup.from_json(g) for g in data.get("groups") or ()),
            still_holding=tuple(HeldDeviation(d["nodeid"], d.get("expectation")) for d in data.get("still_holding") or ()),
            not_remeasured=tuple(HeldDeviation(d["nodeid"], why=d.get("why")) for d in data.get("not_remeasured") or ()),
            runs=tuple(RunChange.from_json(r) for r in data.get("runs") or ()),
            baseline_runs=SessionRuns(**launches.get("baseline", {})),
            candidate_runs=SessionRuns(**launches.get("candidate", {})),
            pip_check=tuple(data.get("pip_check") or ()),
            stack_preflight=tuple(PreflightFinding.from_json(f) for f in data.get("stack_preflight") or ()),
            baseline_session=data.get("baseline_session"), today_session=data.get("today_session"),
            figures_remeasured_today=data.get("figures_remeasured_today", 0), other_suite=data.get("other_suite"),
            baseline_stack=data.get("baseline_stack"), candidate_stack=data.get("candidate_stack"),
            baseline=data.get("baseline"), candidate_report=data.get("candidate_report"))

    def suspects(self) -> list[str]:
        """The contracts a trusted session on this machine should answer for before the candidate
        is blamed: those newly failing and those whose figures moved."""
        return sorted({c.nodeid for c in self.contracts if c.category == "newly failing"}
                      | {m.nodeid for m in self.measured})

    def changed_outcomes(self) -> list[str]:
        """The contracts whose outcome changed (what ``--bisect`` attributes)."""
        return [c.nodeid for c in self.contracts if c.category not in ("unchanged", "new", "missing")]
