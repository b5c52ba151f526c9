"""A training run as the session report carries it (``report.json``'s ``runs``): the record
``fixtures.runs.result.RunResult.to_json`` writes, read back by the summary, the gate and the
upgrade check.

Only what those readers interpret is typed (the steps' figures, the launch's exit and its root
cause, the compile cache's events); the rest (the run's spec, the launch's command lines and
logs) is carried verbatim as the writer wrote it, so a report re-written through these records
loses nothing, and a report of an earlier round (a run spec with fields since renamed) still
reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fixtures.oracles.performance_record import CompileCacheEvents


@dataclass(frozen=True)
class StepRecord:
    """One logged training step (``fixtures.runs.result.StepMetrics``), as rank 0 logged it: the
    figures the pages read (loss, step time, memory); the rest (max loss, grad norm, tokens/s)
    as written."""

    step: int
    loss: float | None = None
    step_time_s: float | None = None
    memory_gib: float | None = None
    rest: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StepRecord:
        read = ("step", "loss", "step_time_s", "memory_gib")
        return cls(step=data.get("step", 0), loss=data.get("loss"), step_time_s=data.get("step_time_s"),
                   memory_gib=data.get("memory_gib"), rest={k: v for k, v in data.items() if k not in read})

    def to_json(self) -> Mapping[str, Any]:
        return {"step": self.step, "loss": self.loss, **self.rest, "memory_gib": self.memory_gib,
                "step_time_s": self.step_time_s}


@dataclass(frozen=True)
class RootCauseRecord:
    """The exception a launch died of (``fixtures.launch.culprit.RootCause``): its message and
    traceback; the rest as written."""

    message: str | None = None
    traceback: str | None = None
    rest: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RootCauseRecord | None:
        if data is None:
            return None
        return cls(message=data.get("message"), traceback=data.get("traceback"),
                   rest={k: v for k, v in data.items() if k not in ("message", "traceback")})

    def to_json(self) -> Mapping[str, Any]:
        return {**self.rest, "message": self.message, "traceback": self.traceback}


LAUNCH_FIELDS = ("returncode", "timed_out", "wall_s", "stopped", "root_cause")


@dataclass(frozen=True)
class LaunchRecord:
    """How the launch ended (``fixtures.launch.launcher.LaunchOutcome.to_dict``): its exit, its
    wall time, a stop at the expected-failure cap, the root cause; the rest as written."""

    returncode: int | None = 0
    timed_out: bool = False
    wall_s: float = 0.0
    stopped: str | None = None  # why the run was stopped early (only known deviations asked for it)
    root_cause: RootCauseRecord | None = None
    rest: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchRecord:
        return cls(returncode=data.get("returncode"), timed_out=data.get("timed_out", False),
                   wall_s=data.get("wall_s", 0.0), stopped=data.get("stopped"),
                   root_cause=RootCauseRecord.from_json(data.get("root_cause")),
                   rest={k: v for k, v in data.items() if k not in LAUNCH_FIELDS})

    def to_json(self) -> Mapping[str, Any]:
        return {**self.rest, "returncode": self.returncode, "timed_out": self.timed_out, "wall_s": self.wall_s,
                "stopped": self.stopped, "root_cause": self.root_cause.to_json() if self.root_cause else None}


@dataclass(frozen=True)
class RunRecord:
    """One run a session used: its cache key, what it was (``description``, the spec's own
    words), the session that launched it, whether it trained, its steps and its launch."""

    key: str
    description: str
    ok: bool = True
    session: str = ""
    steps: tuple[StepRecord, ...] = ()
    launch: LaunchRecord = field(default_factory=LaunchRecord)
    compile_cache: CompileCacheEvents | None = None
    spec: Mapping[str, Any] = field(default_factory=dict)  # fixtures.runs.spec.RunSpec.to_json, as written
    run_dir: str = ""
    finished_at: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        # reports of the first rounds (format 1, 2026-11-29 to 12-01) kept the launch's exit flat
        # in the run and named its session ``launched_in_session``
        launch = data.get("launch") or {name: data[name] for name in LAUNCH_FIELDS if name in data}
        return cls(key=data.get("key", ""), description=data.get("description", ""), ok=data.get("ok", True),
                   session=data.get("session", data.get("launched_in_session", "")),
                   steps=tuple(StepRecord.from_json(s) for s in data.get("steps") or ()),
                   launch=LaunchRecord.from_json(launch),
                   compile_cache=CompileCacheEvents.from_json(data.get("compile_cache")),
                   spec=data.get("spec") or {}, run_dir=data.get("run_dir", ""),
                   finished_at=data.get("finished_at", 0.0))

    def to_json(self) -> Mapping[str, Any]:
        return {"spec": dict(self.spec), "key": self.key, "run_dir": self.run_dir, "launch": self.launch.to_json(),
                "steps": [s.to_json() for s in self.steps], "session": self.session,
                "finished_at": self.finished_at, "description": self.description, "ok": self.ok,
                "compile_cache": self.compile_cache.to_json() if self.compile_cache else None}
