"""Clean exit: every run of the catalogue that must train ends with exit code 0 on every rank.

The contracts that read a run require only that it trained (``require_trained``: every rank
recorded every step and finished its Python program). A rank that then dies in native
teardown ("terminate called without an active exception", SIGABRT) fails this contract,
for that run alone, with the rank, the signal and the threads it still had when Python
finished (the exit marker, ``fixtures.rank.probes.exit_marker``). The expected value is the
OS's exit status of each rank as torchrun reports it, not anything the run writes itself.

The runs are the catalogue's (``fixtures.runs.catalogue``) entries that must train, on
every tier they apply to: a new run cannot go unchecked, and a run only another contract
launches adds no launch here.
"""

from __future__ import annotations

import pytest

from fixtures.contract import expect, expect_clean_exit, require_trained
from fixtures.runs.catalogue import CATALOGUE, CPU_ONLY, EVERY_TIER, TRN2_ONLY

pytestmark = [pytest.mark.runs, pytest.mark.slow]


@pytest.mark.parametrize("name", CATALOGUE.names(tiers=EVERY_TIER, trains=True))
def test_run_exits_cleanly(tier, titan_runs, name):
    """A run every tier launches trains and then exits with code 0 on every rank."""
    expect_clean_exit(titan_runs.get(CATALOGUE.spec(name, tier)), tier.gloo_process_group)


@pytest.mark.only_tiers("cpu", reason="the tiny checkpoint variants and the pretraining run exist only on "
                        "the cpu tier (trn2 loads the model folder it is given)")
@pytest.mark.parametrize("name", CATALOGUE.names(tiers=CPU_ONLY, trains=True))
def test_cpu_run_exits_cleanly(tier, titan_runs, name):
    """A run only the cpu tier launches trains and then exits with code 0 on every rank."""
    expect_clean_exit(titan_runs.get(CATALOGUE.spec(name, tier)), tier.gloo_process_group)


@pytest.mark.only_tiers("trn2", reason="the trn2 tier's own performance run (the cpu tier measures its "
                        "pretraining run, which the clean-exit contract above covers)")
@pytest.mark.parametrize("name", CATALOGUE.names(tiers=TRN2_ONLY, trains=True))
def test_trn2_run_exits_cleanly(tier, titan_runs, name):
    """A run only the trn2 tier launches trains and then exits with code 0 on every rank."""
    expect_clean_exit(titan_runs.get(CATALOGUE.spec(name, tier)), tier.gloo_process_group)


@pytest.mark.only_tiers("trn2", reason="device memory per logical NeuronCore exists only on a Neuron device")
@pytest.mark.parametrize("name", CATALOGUE.names(tiers=EVERY_TIER, trains=True) + CATALOGUE.names(tiers=TRN2_ONLY, trains=True))
def test_every_rank_fits_its_logical_core(tier, titan_runs, name):
    """Every rank's peak device memory (torchtitan's ``memory/max_reserved(GiB)``, from the
    device module's statistics) is measured and within one logical NeuronCore's memory at
    the session's LNC: 24 GiB at LNC=2 on Trainium2 (the tier profile's figure, with its
    source; the rehearsal's cap is planned for its tiny model, fixtures.runs.memory_plan)."""
    run = require_trained(titan_runs.get(CATALOGUE.spec(name, tier)))
    capacity_gib = tier.device_memory_bytes / 2**30
    for rank in range(run.world_size):
        peaks = [s.memory_gib for s in run.rank_steps(rank)]
        peak = max(peaks) if peaks else float("nan")
        expect(peak > 0, f"rank {rank}: its peak device memory was measured (torchtitan's DeviceMemoryMonitor "
               f"reads torch.{tier.device_type}.memory_stats()['reserved_bytes.all.peak'] and logs -1 bytes when "
               "the device module has no such key: a negative figure names that gap)", "> 0 GiB",
               f"{peak:.4g} GiB" + (" (the key is missing from memory_stats())" if peak < 0 else ""), run)
        expect(peak <= capacity_gib, f"rank {rank}: peak device memory fits a logical core",
               f"<= {capacity_gib:.4g} GiB", f"{peak:.4g} GiB", run)
