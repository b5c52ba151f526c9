"""What a session's report says it ran on: the machine its figures belong to, the suite that
measured them, the tier profiles, and whose expectations each tier applied (the parts of
``report.json`` taken from the session's configuration, ``reports.session_report``)."""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path

import psutil
import pytest

from fixtures.data import assets
from fixtures.session import session_state
from fixtures.session.expectations import expectation_source, tier_stack_id
from fixtures.tiers import machine as machine_numerics
from fixtures.tiers import stack
from fixtures.tiers.tier_profile import cpu_profile
from reports.session_report import ExpectationSourceRecord, MachineRecord, SuiteIdentity


def _host() -> str:
    """The CPU model, its logical CPUs and memory."""
    cpuinfo = Path("/proc/cpuinfo")
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if cpuinfo.exists() \
        else platform.processor()
    return f"{model} x{psutil.cpu_count()}, {psutil.virtual_memory().total / 2**30:.0f} GiB"


def machine(config: pytest.Config) -> MachineRecord:
    """What the performance figures belong to: the trn2 instance type (a rehearsal says it is
    one), else the CPU model, its logical CPUs and memory (a cpu figure is only comparable on
    the same machine)."""
    trn2 = session_state.trn2_profile(config)
    host = _host()
    # the numerics identity (fixtures.tiers.machine): the kernel paths the session's figures
    # were computed on; a baseline of another key was computed on other paths
    described = machine_numerics.describe()
    numerics = {"numerics": described, "numerics_key": machine_numerics.key(described),
                "numerics_label": machine_numerics.label(described)}
    if trn2 is not None and trn2.instance:
        # what a trn2 figure also depends on: the LNC, the cores the session was given, the
        # Neuron runtime's and driver's versions (a figure of another of these is another machine's)
        cores = f"{trn2.first_core}-{trn2.first_core + trn2.nproc_per_node - 1}"
        return MachineRecord(name=f"{trn2.instance} LNC={trn2.lnc} cores {cores}"
                                  + (" (rehearsal on " + host + ")" if trn2.rehearsal else ""),
                             instance=trn2.instance, host=host, lnc=trn2.lnc, cores=cores,
                             neuron_versions={**stack.deb_versions(), "driver": stack.neuron_driver_version()},
                             **numerics)
    return MachineRecord(name=host, host=host, **numerics)


def suite_identity(config: pytest.Config, nodeids: Iterable[str]) -> SuiteIdentity:
    """What the suite itself was when it measured: its assets' recipe and files (the tiny
    checkpoints, tokenizer and dataset every cpu figure comes from), and its contract set
    (``nodeids``). A baseline of another suite measured other things: the gate and the upgrade
    page compare no figure across it."""
    recipe = assets.recipe_key()
    manifest = session_state.cache_root(config) / "assets" / recipe / "manifest.json"
    files = json.loads(manifest.read_text())["files"] if manifest.is_file() else None
    nodeids = sorted(nodeids)
    return SuiteIdentity(assets_recipe=recipe,
                         assets_files=hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
                         if files else None,
                         contracts=len(nodeids),
                         contracts_digest=hashlib.sha256("\n".join(nodeids).encode()).hexdigest()[:16])


def platform_profiles(config: pytest.Config) -> Mapping[str, str]:
    """Each tier profile of the session in words."""
    out = {"cpu": cpu_profile().describe()}
    trn2 = session_state.trn2_profile(config)
    if trn2 is not None:
        out["trn2"] = trn2.describe()
    return out


def expectation_sources(config: pytest.Config, tiers: Iterable[str]) -> Mapping[str, ExpectationSourceRecord]:
    """Per tier run: whose expectations file applied (its own, or inherited, and from whom)."""
    out = {}
    for tier in sorted(tiers):
        stack_name = tier_stack_id(config, tier)
        try:
            source = expectation_source(config, stack_name)
        except pytest.UsageError as exc:
            out[tier] = ExpectationSourceRecord(stack=stack_name, how="none", error=str(exc))
            continue
        out[tier] = ExpectationSourceRecord(stack=source.stack, how=source.how, file_stack=source.file_stack,
                                            inherited_from=None if source.how == "own" else source.file_stack)
    return out
