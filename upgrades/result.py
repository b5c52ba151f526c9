"""What one upgrade check found, as one frozen value built once from its typed parts: the
comparison of the two sessions (``upgrades.comparison``), the performance sessions' verdict,
the bisection and the promotion. The verdict is derived from them (``upgrades.verdict``)
whenever it is asked for, never edited as text; ``to_json`` is ``upgrade.json`` and
``from_json`` reads it back (``upgrades.matrix``); the page renders from it (``upgrades.page``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixtures.oracles.performance import PerfPolicy
from upgrades.candidates import Candidate
from upgrades.comparison import Comparison
from upgrades.perf_compare import Verdict
from upgrades.perf_history import HistoryComparison
from upgrades.verdict import ContractVerdict, UpgradeVerdict

FORMAT = "qwen3-trn-conformance upgrade check, 1"


@dataclass(frozen=True)
class PerformanceCheck:
    """The performance sessions' verdict, the thresholds it applied, the stored history's
    comparison, and the page's section (``upgrades.perf_page``, ``upgrades.perf_history``)."""

    verdict: Verdict
    lines: tuple[str, ...] = ()
    policy: PerfPolicy | None = None  # None: no session was run (``--performance-launches 0``)
    history: HistoryComparison | None = None

    def to_json(self) -> Mapping[str, Any]:
        out = dict(self.verdict.to_json())
        if self.policy is not None:
            out |= {"policy": self.policy.to_json(), "history": self.history.to_json() if self.history else {}}
        return out | {"lines": list(self.lines)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PerformanceCheck:
        policy = data.get("policy")
        return cls(verdict=Verdict.from_json(data), lines=tuple(data.get("lines") or ()),
                   policy=PerfPolicy.from_json(policy) if policy else None,
                   history=HistoryComparison.from_json(data.get("history")))


@dataclass(frozen=True)
class BisectFindings:
    """``--bisect``: which single package change reproduces each changed contract's outcome,
    and the environments built for it (``single``: package -> node id -> outcome)."""

    environments_built: int = 0
    environments_reused: int = 0
    attribution: Mapping[str, str] = field(default_factory=dict)  # node id -> who flips it
    single: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def to_json(self) -> Mapping[str, Any]:
        out = {"environments_built": self.environments_built, "environments_reused": self.environments_reused,
               "attribution": dict(self.attribution)}
        return out | ({"single": {pin: dict(o) for pin, o in self.single.items()}} if self.single else {})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BisectFindings:
        return cls(environments_built=data["environments_built"], environments_reused=data["environments_reused"],
                   attribution=dict(data["attribution"]), single=dict(data.get("single") or {}))


@dataclass(frozen=True)
class UpgradeResult:
    comparison: Comparison  # upgrades.compare.compare's, its paths relative to the page
    selection: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    partial: bool  # the selection is not the whole tier: never a promotion
    performance: PerformanceCheck | None = None
    bisect: BisectFindings | None = None
    bisected: bool = False  # --bisect was asked (its result may be None: nothing to bisect)
    promote: tuple[str, ...] | None = None
    constraints: str | None = None

    @property
    def verdict(self) -> UpgradeVerdict:
        return verdict_of(self.comparison.verdict, self.performance, self.selection, self.partial)

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    def to_json(self) -> Mapping[str, Any]:
        verdict = self.verdict
        out = {**self.comparison.to_json(), "verdict": verdict.text(), "outcome": str(verdict.outcome),
               "passed": verdict.passed, "selection": list(self.selection),
               "candidates": [c.to_json() for c in self.candidates], "partial": self.partial, "format": FORMAT}
        if self.performance is not None:
            out["performance"] = self.performance.to_json()
        if self.bisected:
            out["bisect"] = self.bisect.to_json() if self.bisect else None
        if self.promote is not None:
            out["promote"], out["constraints"] = list(self.promote), self.constraints
        return out

    @classmethod
    def read(cls, path: Path) -> UpgradeResult:
        """A check's ``upgrade.json``."""
        return cls.from_json(json.loads(Path(path).read_text()))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> UpgradeResult:
        performance, bisect = data.get("performance"), data.get("bisect")
        return cls(comparison=Comparison.from_json(data), selection=tuple(data.get("selection") or ()),
                   candidates=tuple(Candidate(**{**c, "install": tuple(c["install"])}) for c in data["candidates"]),
                   partial=data.get("partial", False),
                   performance=PerformanceCheck.from_json(performance) if performance is not None else None,
                   bisect=BisectFindings.from_json(bisect) if bisect else None, bisected="bisect" in data,
                   promote=tuple(data["promote"]) if data.get("promote") is not None else None,
                   constraints=data.get("constraints"))


def verdict_of(contracts: ContractVerdict, performance: PerformanceCheck | None, selection: tuple[str, ...],
               partial: bool) -> UpgradeVerdict:
    """The upgrade's verdict from its parts: the contracts', the performance findings (with
    whether they pass: accepted ones do), and the selection where it is not the whole tier."""
    return UpgradeVerdict(contracts, performance=performance.verdict.findings if performance else None,
                          performance_passed=performance.verdict.passed if performance else True,
                          partial_selection=tuple(selection) if partial else None)
