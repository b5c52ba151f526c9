"""The installed stack as the session report records it (``reports.inventory.inventory``,
``report.json``'s ``inventory``): read by the gate (version drift), the summary's stack table
and the pins."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NkilibRecord:
    """Which nkilib the kernels get (``reports.inventory.nkilib_finding``) and a mismatch with
    the compiler's; the rest of the finding as written."""

    active: str
    active_version: str | None = None
    mismatch: str | None = None
    rest: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> NkilibRecord | None:
        if not data:
            return None
        return cls(active=data.get("active", ""), active_version=data.get("active_version"),
                   mismatch=data.get("mismatch"),
                   rest={k: v for k, v in data.items() if k not in ("active", "active_version", "mismatch")})

    def to_json(self) -> Mapping[str, Any]:
        return {"active": self.active, "active_version": self.active_version, **self.rest, "mismatch": self.mismatch}


@dataclass(frozen=True)
class TitanApiRecord:
    """What torchtitan's API offers (``fixtures.rank.titan.api.installed_summary``): its
    override API in words; the rest as written."""

    override_api: str
    rest: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TitanApiRecord | None:
        if not data:
            return None
        return cls(override_api=data.get("override_api", ""),
                   rest={k: v for k, v in data.items() if k != "override_api"})

    def to_json(self) -> Mapping[str, Any]:
        return {"override_api": self.override_api, **self.rest}


@dataclass(frozen=True)
class Inventory:
    """Every tracked package's version (None: not installed), the interpreter, the builds of
    torch and torchtitan, the active nkilib, torchtitan's API, and the Neuron system packages
    and driver."""

    python: str
    packages: Mapping[str, str | None] = field(default_factory=dict)
    torch_build: str | None = None
    torchtitan_build: str | None = None
    nkilib: NkilibRecord | None = None
    torchtitan_api: TitanApiRecord | None = None
    system_packages: Mapping[str, str | None] = field(default_factory=dict)
    neuron_driver: str | None = None
    python_executable: str | None = None
    torchtitan_neuron_commit: str | None = None
    torchtitan_origin: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Inventory | None:
        if data is None:
            return None
        return cls(python=data.get("python", ""), packages=dict(data.get("packages") or {}),
                   torch_build=data.get("torch_build"), torchtitan_build=data.get("torchtitan_build"),
                   nkilib=NkilibRecord.from_json(data.get("nkilib")),
                   torchtitan_api=TitanApiRecord.from_json(data.get("torchtitan_api")),
                   system_packages=dict(data.get("system_packages") or {}), neuron_driver=data.get("neuron_driver"),
                   python_executable=data.get("python_executable"),
                   torchtitan_neuron_commit=data.get("torchtitan_neuron_commit"),
                   torchtitan_origin=data.get("torchtitan_origin"))

    def to_json(self) -> Mapping[str, Any]:
        return {"python": self.python, "python_executable": self.python_executable, "packages": dict(self.packages),
                "torchtitan_build": self.torchtitan_build, "torch_build": self.torch_build,
                "torchtitan_neuron_commit": self.torchtitan_neuron_commit, "torchtitan_origin": self.torchtitan_origin,
                "torchtitan_api": self.torchtitan_api.to_json() if self.torchtitan_api else None,
                "nkilib": self.nkilib.to_json() if self.nkilib else None,
                "system_packages": dict(self.system_packages), "neuron_driver": self.neuron_driver}

    @property
    def versions(self) -> Mapping[str, str | None]:
        """Every tracked package's version and the interpreter's (``python``): what the gate
        calls drift."""
        return {**self.packages, "python": self.python}
