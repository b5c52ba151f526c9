"""Session reports for meta tests, built with the records' constructors
(``reports.session_report``): a report of given outcomes, and one contract of it changed."""

from __future__ import annotations

from dataclasses import replace

from reports.session_report import ContractRecord, SessionReport, SuiteIdentity

STACK = "cpu-torch2.14-titan0.3"


def contract(nodeid: str, outcome: str, index: int = 0) -> ContractRecord:
    """A contract as a session records it: a known deviation with its expectations line, a
    failure with its repro bundle and message."""
    failing = outcome in ("failed", "xpassed")
    return ContractRecord(
        nodeid=nodeid, outcome=outcome,
        expectation=f"{STACK}.txt:{index + 4}" if outcome == "xfailed" else None,
        repro_bundle=f"/r/{nodeid}" if failing else None,
        message=("[XPASS(strict)] known deviation" if outcome == "xpassed" else "AssertionError") if failing else None)


def session(outcomes: dict[str, str], **fields) -> SessionReport:
    """A complete session of the reference stack with these outcomes (node id -> outcome)."""
    contracts = tuple(contract(nodeid, outcome, i) for i, (nodeid, outcome) in enumerate(outcomes.items()))
    return SessionReport(**{"session": "s", "complete": True, "stack_id": {"cpu": STACK},
                            "suite": SuiteIdentity(assets_recipe="recipe", assets_files="files"),
                            "contracts": contracts, **fields})


def with_contract(report: SessionReport, nodeid: str, **changes) -> SessionReport:
    """``report`` with one contract's fields changed."""
    return replace(report, contracts=tuple(replace(c, **changes) if c.nodeid == nodeid else c
                                           for c in report.contracts))


def with_measured(report: SessionReport, figures: dict[str, dict]) -> SessionReport:
    """``report`` with each contract's measured figures (node id -> {name: value})."""
    return replace(report, contracts=tuple(replace(c, measured=figures[c.nodeid]) if c.nodeid in figures else c
                                           for c in report.contracts))
