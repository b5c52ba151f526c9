"""One ``ContractRecord`` per test, from the reports the pytest controller sees (setup, call,
teardown): its outcome, duration, failure text, the runs it read and the figures it measured."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from fixtures.oracles.performance_record import PerformanceRecord
from reports.redact import scrub_text
from reports.session_report import ContractRecord

PERFORMANCE_FIGURE = "performance"  # the performance contract's record_property
EXPORT_MANIFEST_FIGURE = "export_manifest"  # test_checkpoint's
TAKEN_AS_IS = ("repro_bundle", "expectation", "tier", "area", "rehearsal")


def outcome_of(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if report.when != "call" and report.failed:
        return "error"
    return report.outcome


def merged(record: ContractRecord | None, report: pytest.TestReport) -> ContractRecord:
    """``record`` (None: the test's first report) with one more of its reports taken in."""
    record = record or ContractRecord(nodeid=report.nodeid, outcome="passed")
    outcome = outcome_of(report)
    changes = {"duration_s": record.duration_s + report.duration}
    if report.when == "call" or (outcome != "passed" and record.outcome == "passed"):  # setup/teardown
        changes["outcome"] = outcome
    env = dict(os.environ)
    if report.failed or outcome in ("skipped", "xfailed"):
        text = report.longreprtext if report.failed else str(getattr(report, "wasxfail", "")) or report.longreprtext
        changes["message"] = scrub_text(text[-4000:], env)
    if outcome == "xfailed" and report.longreprtext:  # the failure itself, beside the recorded reason
        changes["failure"] = scrub_text(report.longreprtext[-4000:], env)
    record = replace(record, **changes)
    for name, value in report.user_properties:
        record = _with_property(record, name, value)
    if "[" in report.nodeid:
        record = replace(record, parameters=report.nodeid.split("[", 1)[1].rstrip("]"))
    return record


def _with_property(record: ContractRecord, name: str, value) -> ContractRecord:
    """One user property: a run it read, a field of the record, or a figure it measured
    (``record_property``: errors, losses, dtypes, the performance figures)."""
    if name == "run":
        return record if value in record.runs else replace(record, runs=(*record.runs, value))
    if name in TAKEN_AS_IS:
        return replace(record, **{name: value})
    if name == PERFORMANCE_FIGURE:
        return replace(record, performance=PerformanceRecord.from_json(value))
    if name == EXPORT_MANIFEST_FIGURE:
        return replace(record, export_manifest=str(value))
    figure = value if isinstance(value, (int, float, bool)) else str(value)
    return replace(record, measured={**record.measured, name: figure})


class Collector:
    """Keeps one record per test (node id -> ``ContractRecord``) from the reports the
    controller sees."""

    def __init__(self):
        self.records = {}  # node id -> ContractRecord

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.records[report.nodeid] = merged(self.records.get(report.nodeid), report)
