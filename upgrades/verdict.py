"""The upgrade check's verdict as data: what the contracts say (``ContractVerdict``, from
``upgrades.compare``), what the performance sessions say, and whether the selection was the
whole tier, composed once into the outcome and the words on the page (``UpgradeVerdict``).
No step edits another's words: each part is a field, and ``text`` is the one place they meet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"


class Finding(StrEnum):
    """One word of a performance verdict (``upgrades.perf_compare``); a verdict is PASS, NOT
    MEASURED, FIGURES ONLY, or its findings in this order (LARGER and INCONCLUSIVE: memory
    flagged, step time undecided). Pages write them joined with "+" (``label``)."""

    PASS = "PASS"
    SLOWER = "SLOWER"
    SLOWER_COMPILE = "SLOWER COMPILE"  # the first step on a cold compile cache
    LARGER = "LARGER"
    LEAKING = "LEAKING"
    INCONCLUSIVE = "INCONCLUSIVE"
    NOT_MEASURED = "NOT MEASURED"
    FIGURES_ONLY = "FIGURES ONLY"  # the tier's thresholds are not measured on this host type: no verdict


def label(findings: tuple[Finding, ...]) -> str:
    """A performance verdict's findings as the pages write them: "LARGER+INCONCLUSIVE"."""
    return "+".join(findings)


@dataclass(frozen=True)
class Owner:
    """The failing contracts one owner (the suite's own gap, the candidate's behaviour, ...)
    accounts for, and in how many causes."""

    owner: str
    contracts: int
    causes: int


@dataclass(frozen=True)
class ContractVerdict:
    """The contracts' side: what blocks the candidate (``problems``), who owns the failures,
    the known deviations it fixes or keeps, and the failures this machine shares."""

    problems: tuple[str, ...] = ()
    owners: tuple[Owner, ...] = ()
    fixed: int = 0
    still_holding: int = 0
    fail_here_too: int = 0  # contracts the trusted stack fails on this machine too

    @property
    def passed(self) -> bool:
        return not self.problems

    def body(self) -> str:
        """The words after the outcome: ": <problems> (<owners>)" or ": the candidate keeps ..."."""
        if self.problems:
            text = ": " + ", ".join(self.problems)
            if self.owners:
                text += " (" + "; ".join(f"{o.contracts} in {o.causes} cause(s) {o.owner}" for o in self.owners) + ")"
        elif self.fixed:
            text = (f" once {self.fixed} expectations line(s) are deleted: the candidate keeps every contract and "
                    "fixes known deviations")
        else:
            text = ": the candidate keeps every contract of the baseline"
            if self.still_holding:
                text += f", {self.still_holding} known deviation(s) still holding"
        if self.fail_here_too:
            text += (f"; {self.fail_here_too} contract(s) fail on this machine with the trusted stack too (this "
                     "machine's, not the candidate's)")
        return text

    def text(self) -> str:
        return f"{Outcome.PASS if self.passed else Outcome.FAIL}{self.body()}"

    def to_json(self) -> Mapping[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContractVerdict:
        return cls(problems=tuple(data["problems"]), owners=tuple(Owner(**o) for o in data["owners"]),
                   fixed=data["fixed"], still_holding=data["still_holding"], fail_here_too=data["fail_here_too"])


@dataclass(frozen=True)
class UpgradeVerdict:
    """The whole check: the contracts, the performance verdict's findings (None: not run), and
    the selection when it was not the whole tier (then the result is never a promotion)."""

    contracts: ContractVerdict
    performance: tuple[Finding, ...] | None = None
    performance_passed: bool = True
    partial_selection: tuple[str, ...] | None = None

    @property
    def outcome(self) -> Outcome:
        return Outcome.PASS if self.contracts.passed and self.performance_passed else Outcome.FAIL

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    def text(self) -> str:
        performance = label(self.performance or ())
        if self.contracts.passed and not self.performance_passed:
            text = f"{Outcome.FAIL} (performance {performance}){self.contracts.body()}"
        else:
            text = self.contracts.text()
            if not self.performance_passed:
                text += f"; performance {performance}"
        if self.performance == (Finding.FIGURES_ONLY,):
            text += "; performance not judged (figures only: no A/A series of this host type)"
        if self.partial_selection is not None:
            text += f" (on the selection `pytest {' '.join(self.partial_selection)}`; not a promotion)"
        return text
