"""The session report (``report.json``) as records: what ``reports.plugin`` writes and the
gate, the summary, the pins, the performance history and the upgrade check read.

One record per part, each with ``from_json`` (the one place the JSON's keys are read) and
``to_json`` (the one place they are written). ``SCHEMA_VERSION`` is the format's version,
written into every report: a report of an earlier round of format 1 (before the suite's
identity, the machine or the expectations' sources were recorded) reads back with those parts
None or empty; a report of a later format is refused rather than misread.
(``meta_tests/test_session_report.py`` reads every committed baseline and history file.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixtures.oracles.performance_record import PerformanceRecord
from reports.inventory_record import Inventory
from reports.run_record import RunRecord

SCHEMA_VERSION = 1
Figure = int | float | bool | str  # a figure a contract measured (``record_property``)


class ReportFormatError(ValueError):
    """A report this suite cannot read (a later format, or not a report at all)."""


@dataclass(frozen=True)
class ContractRecord:
    """One contract (test) of the session: its outcome, what it measured and what explains a
    failure. ``performance`` and ``export_manifest`` are the two structured figures (the
    performance contract's, ``fixtures.oracles.performance_record``, and test_checkpoint's
    exported tensors, kept as recorded); ``measured`` holds the plain ones."""

    nodeid: str
    outcome: str  # passed, failed, error, skipped, xfailed, xpassed
    duration_s: float = 0.0
    area: str | None = None
    tier: str | None = None
    rehearsal: bool | None = None
    message: str | None = None  # the failure, or the skip's or known deviation's reason
    failure: str | None = None  # an xfail's own failure, beside its recorded reason
    runs: tuple[str, ...] = ()  # the run keys it read
    repro_bundle: str | None = None
    expectation: str | None = None  # the expectations line of a known deviation
    measured: Mapping[str, Figure] = field(default_factory=dict)
    performance: PerformanceRecord | None = None
    export_manifest: str | None = None  # JSON: [[name, shape, dtype], ...]
    parameters: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContractRecord:
        measured = dict(data.get("measured") or {})
        performance, manifest = measured.pop("performance", None), measured.pop("export_manifest", None)
        return cls(nodeid=data["nodeid"], outcome=data["outcome"], duration_s=data.get("duration_s", 0.0),
                   area=data.get("area"), tier=data.get("tier"), rehearsal=data.get("rehearsal"),
                   message=data.get("message"), failure=data.get("failure"), runs=tuple(map(_run_key, data.get("runs") or ())),
                   repro_bundle=data.get("repro_bundle"), expectation=data.get("expectation"),
                   measured=measured, performance=PerformanceRecord.from_json(performance) if performance else None,
                   export_manifest=manifest, parameters=data.get("parameters"))

    def to_json(self) -> Mapping[str, Any]:
        out = {"nodeid": self.nodeid, "outcome": self.outcome, "duration_s": self.duration_s, "area": self.area,
               "tier": self.tier}
        optional = {"rehearsal": self.rehearsal, "message": self.message, "failure": self.failure,
                    "runs": list(self.runs) or None, "repro_bundle": self.repro_bundle,
                    "expectation": self.expectation, "measured": self._measured_json() or None,
                    "parameters": self.parameters}
        return out | {name: value for name, value in optional.items() if value is not None}

    def _measured_json(self) -> Mapping[str, Figure]:
        structured = {"performance": self.performance.to_text() if self.performance else None,
                      "export_manifest": self.export_manifest}
        return {**self.measured, **{name: text for name, text in structured.items() if text is not None}}

    @property
    def exported_dtypes(self) -> list[str] | None:
        """The dtypes of the tensors the contract's export held (sorted), None where it recorded
        no readable manifest."""
        if not self.export_manifest:
            return None
        try:
            manifest = json.loads(self.export_manifest)
        except ValueError:
            return None
        return sorted({str(i[2]) for i in manifest if isinstance(i, list) and len(i) == 3}) or None


def _run_key(run: str | Mapping[str, str]) -> str:
    """A run a contract read, by its key (reports of the first rounds named it ``{"key", "run_dir"}``)."""
    return run if isinstance(run, str) else run["key"]


@dataclass(frozen=True)
class MachineRecord:
    """What the session's figures belong to (``reports.plugin.machine``): its name, the host,
    the numerics identity (``fixtures.tiers.machine``: the kernel paths), and on trn2 the
    instance type, LNC, cores and the Neuron runtime's and driver's versions."""

    name: str | None = None
    host: str | None = None
    numerics: Mapping[str, Any] | None = None
    numerics_key: str | None = None
    numerics_label: str | None = None
    instance: str | None = None
    lnc: int | None = None
    cores: str | None = None
    neuron_versions: Mapping[str, str | None] | None = None

    FIELDS = ("name", "instance", "host", "lnc", "cores", "neuron_versions", "numerics", "numerics_key",
              "numerics_label")

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> MachineRecord | None:
        if data is None:
            return None
        return cls(**{name: data.get(name) for name in cls.FIELDS})

    def to_json(self) -> Mapping[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS
                if getattr(self, name) is not None or name in ("name", "host")}


@dataclass(frozen=True)
class SuiteIdentity:
    """What the suite was when it measured (``reports.plugin.suite_identity``): its assets'
    recipe and files, and its contract set. Figures of another suite are not compared."""

    assets_recipe: str | None = None
    assets_files: str | None = None
    contracts: int | None = None
    contracts_digest: str | None = None

    FIELDS = ("assets_recipe", "assets_files", "contracts", "contracts_digest")

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> SuiteIdentity | None:
        return cls(**{name: data.get(name) for name in cls.FIELDS}) if data else None

    def to_json(self) -> Mapping[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}


@dataclass(frozen=True)
class ExpectationSourceRecord:
    """Whose expectations file a tier applied (``fixtures.session.expectations.ExpectationSource``),
    or why none could be found (``error``)."""

    stack: str
    how: str  # own, inherited, nearest, or none
    file_stack: str | None = None
    inherited_from: str | None = None
    error: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExpectationSourceRecord:
        return cls(stack=data["stack"], how=data["how"], file_stack=data.get("file_stack"),
                   inherited_from=data.get("inherited_from"), error=data.get("error"))

    def to_json(self) -> Mapping[str, Any]:
        if self.error is not None:
            return {"stack": self.stack, "how": self.how, "error": self.error}
        return {"stack": self.stack, "file_stack": self.file_stack, "how": self.how,
                "inherited_from": self.inherited_from}


@dataclass(frozen=True)
class PreflightFinding:
    """What the stack preflight of a tier found: the runs one cause stopped (``ok`` False), the
    runs it cleared, or a fact of the write-up's own config (``kind`` "stack fact")."""

    tier: str
    ok: bool
    message: str = ""
    runs: tuple[str, ...] = ()
    kind: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PreflightFinding:
        return cls(tier=data["tier"], ok=data["ok"], message=data.get("message", ""),
                   runs=tuple(data.get("runs") or ()), kind=data.get("kind"))

    def to_json(self) -> Mapping[str, Any]:
        kind = {"kind": self.kind} if self.kind is not None else {}
        return {"tier": self.tier, "ok": self.ok, **kind, "message": self.message, "runs": list(self.runs)}


@dataclass(frozen=True)
class NotLaunched:
    """A run a tier's guards refused (the session budget spent, a fact of the stack, memory)."""

    tier: str
    run: str
    why: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NotLaunched:
        return cls(tier=data["tier"], run=data["run"], why=data.get("why", ""))

    def to_json(self) -> Mapping[str, Any]:
        return {"tier": self.tier, "run": self.run, "why": self.why}


@dataclass(frozen=True)
class NotCovered:
    """A contract a tier does not collect, and why."""

    test: str
    tier: str
    reason: str
    rehearsal: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NotCovered:
        return cls(test=data["test"], tier=data["tier"], reason=data.get("reason", ""),
                   rehearsal=data.get("rehearsal", False))

    def to_json(self) -> Mapping[str, Any]:
        return {"test": self.test, "tier": self.tier, "rehearsal": self.rehearsal, "reason": self.reason}


@dataclass(frozen=True)
class SessionReport:
    """One session of the suite: where it ran, on which stack, what each contract and run did."""

    session: str
    complete: bool = False  # False: interrupted (or written at session start, or no such key)
    contracts: tuple[ContractRecord, ...] = ()
    runs: tuple[RunRecord, ...] = ()
    platforms: tuple[str, ...] = ()  # the tiers run
    stack_id: Mapping[str, str] = field(default_factory=dict)  # tier -> stack id
    rehearsal: bool = False
    machine: MachineRecord | None = None
    suite: SuiteIdentity | None = None
    inventory: Inventory | None = None
    expectations: Mapping[str, ExpectationSourceRecord] = field(default_factory=dict)  # tier -> source
    stack_preflight: tuple[PreflightFinding, ...] = ()
    not_launched: tuple[NotLaunched, ...] = ()
    not_covered: tuple[NotCovered, ...] = ()
    platform_profiles: Mapping[str, str] = field(default_factory=dict)
    markexpr: str = ""
    exitstatus: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionReport:
        version = data.get("schema_version", SCHEMA_VERSION)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ReportFormatError(f"a report of format {version!r}: this suite reads format {SCHEMA_VERSION} "
                                    "and earlier")
        return cls(
            session=data.get("session", ""), complete=data.get("complete", False),
            contracts=tuple(ContractRecord.from_json(c) for c in data.get("contracts") or ()),
            platforms=tuple(data.get("platforms") or ()), stack_id=dict(data.get("stack_id") or {}),
            rehearsal=bool(data.get("rehearsal")), machine=MachineRecord.from_json(data.get("machine")),
            suite=SuiteIdentity.from_json(data.get("suite")),
            expectations={tier: ExpectationSourceRecord.from_json(source)
                          for tier, source in (data.get("expectations") or {}).items()},
            stack_preflight=tuple(PreflightFinding.from_json(f) for f in data.get("stack_preflight") or ()),
            not_launched=tuple(NotLaunched.from_json(n) for n in data.get("not_launched") or ()),
            not_covered=tuple(NotCovered.from_json(n) for n in data.get("not_covered") or ()),
            platform_profiles=dict(data.get("platform_profiles") or {}), markexpr=data.get("markexpr") or "",
            exitstatus=data.get("exitstatus"), started_at=data.get("started_at"),
            finished_at=data.get("finished_at"), schema_version=version,
            # the parts other modules own, last
            runs=tuple(RunRecord.from_json(r) for r in data.get("runs") or ()),
            inventory=Inventory.from_json(data.get("inventory")))

    def to_json(self) -> Mapping[str, Any]:
        return {
            "schema_version": self.schema_version, "complete": self.complete, "exitstatus": self.exitstatus,
            "session": self.session, "started_at": self.started_at, "finished_at": self.finished_at,
            "platforms": list(self.platforms), "stack_id": dict(self.stack_id),
            "expectations": {tier: source.to_json() for tier, source in self.expectations.items()},
            "rehearsal": self.rehearsal, "machine": self.machine.to_json() if self.machine else None,
            "suite": self.suite.to_json() if self.suite else None,
            "platform_profiles": dict(self.platform_profiles),
            "not_covered": [n.to_json() for n in self.not_covered],
            "inventory": self.inventory.to_json() if self.inventory else None,
            "stack_preflight": [f.to_json() for f in self.stack_preflight],
            "not_launched": [n.to_json() for n in self.not_launched], "markexpr": self.markexpr,
            "contracts": [c.to_json() for c in self.contracts], "runs": [r.to_json() for r in self.runs]}

    @classmethod
    def load(cls, path: Path) -> SessionReport:
        """A session's report, given its ``report.json`` or the report folder holding it."""
        path = Path(path)
        return cls.from_json(json.loads((path / "report.json" if path.is_dir() else path).read_text()))

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @property
    def outcomes(self) -> Mapping[str, str]:
        """Node id -> outcome, of every contract."""
        return {c.nodeid: c.outcome for c in self.contracts}

    def contract(self, nodeid: str) -> ContractRecord | None:
        return next((c for c in self.contracts if c.nodeid == nodeid), None)

    @property
    def performance_figures(self) -> Mapping[str, PerformanceRecord]:
        """Node id -> the figures of each contract that recorded performance figures."""
        return {c.nodeid: c.performance for c in self.contracts if c.performance is not None}

    def stacks_of_platforms(self) -> Mapping[str, str | None]:
        """Each tier run -> its stack id (None where the report records none)."""
        return {tier: self.stack_id.get(tier) for tier in self.platforms}

    @property
    def inherited_expectations(self) -> Mapping[str, ExpectationSourceRecord]:
        """The tiers whose expectations came from another stack's file."""
        return {tier: source for tier, source in self.expectations.items() if source.inherited_from}
