"""What one upgrade check found, as one value: the comparison of the two sessions
(``upgrades.compare``), the performance sessions' verdict, the bisection and the promotion,
each filled by the step that finds it. The verdict is derived from them (``upgrades.verdict``)
whenever it is asked for, never edited as text; ``to_json`` is ``upgrade.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

from upgrades.verdict import ContractVerdict, UpgradeVerdict


@dataclass
class UpgradeResult:
    comparison: dict  # upgrades.compare.compare's, its paths relative to the page
    selection: list[str]
    candidates: list[dict]
    partial: bool  # the selection is not the whole tier: never a promotion
    performance: dict | None = None  # perf_compare.Verdict.to_json() with the page's lines
    bisect: dict | None = None
    bisected: bool = False  # --bisect was asked (its result may be None: nothing to bisect)
    promote: list[str] | None = None
    constraints: str | None = None

    @property
    def verdict(self) -> UpgradeVerdict:
        performance = self.performance or {}
        return UpgradeVerdict(ContractVerdict.from_json(self.comparison["contract_verdict"]),
                              performance=performance.get("verdict"),
                              performance_passed=performance.get("passed", True),
                              partial_selection=tuple(self.selection) if self.partial else None)

    @property
    def passed(self) -> bool:
        return self.verdict.passed

    def to_json(self) -> dict:
        verdict = self.verdict
        out = {**self.comparison, "verdict": verdict.text(), "outcome": str(verdict.outcome),
               "passed": verdict.passed, "selection": self.selection, "candidates": self.candidates}
        if self.performance is not None:
            out["performance"] = self.performance
        if self.bisected:
            out["bisect"] = self.bisect
        if self.promote is not None:
            out["promote"], out["constraints"] = self.promote, self.constraints
        return out
