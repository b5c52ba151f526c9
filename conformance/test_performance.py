"""Performance contracts: a steady state is reached and measured, and device memory does not
grow in it.

The run is the tier's catalogue entry marked ``measures_performance`` (cpu: the 200-step pretraining run the tier
launches anyway; trn2: the write-up's run with its RoPE kernel override on every layer, 30
steps). Its figures come from torchtitan's own metric
processor on every rank (``time_metrics/end_to_end(s)``, ``throughput(tps)``,
``memory/max_reserved(GiB)``), split into warm-up and steady state by the rule of
``fixtures.oracles.performance`` (stated and tested there, not "skip step 1"). On trn2 device
memory is also read where the runtime counts it: each rank's core's driver counters by
category after a synchronize (``fixtures.rank.probes.device_memory``), the allocator's reserved
peak leaving out the runtime's code, constants, scratchpad, DMA rings and collectives. The figures go into
``report.json`` (``measured.performance``) and ``summary.md`` with their spread; the upgrade
check compares them between stacks with the measured noise model (``upgrades.perf_compare``).
A slower step is never a red here: whether a step is slow is a comparison, not a threshold on
one machine's absolute time. What is a red here is what no machine excuses: no steady state,
a figure that cannot be measured, and memory that keeps growing (a leak, against the tier's
bound ``TierProfile.performance.leak_mib_per_step``, measured by A/A runs).
"""

from __future__ import annotations

import json
import math

import pytest

from fixtures.oracles import performance
from fixtures.contract import expect, require_trained
from fixtures.rank import probes
from fixtures.rank.titan import training_batch
from fixtures.runs.catalogue import CATALOGUE

pytestmark = [pytest.mark.perf, pytest.mark.slow]


def _figures(tier, titan_runs):
    run = require_trained(titan_runs.get(CATALOGUE.performance_run(tier)))
    device = {rank: run.probe(probes.device_memory, rank) for rank in range(run.world_size)}
    return run, performance.run_figures({rank: run.rank_steps(rank) for rank in range(run.world_size)}, device)


def test_steady_state_is_reached_and_measured(tier, titan_runs, record_property):
    """Every rank of the performance run reaches a steady state by the warm-up rule (at least
    ``MIN_STEADY_STEPS`` steps after the warm-up) and has a finite, positive steady step time,
    tokens/s and peak device memory; where the runtime counts device memory by category
    (``TierProfile.runtime_memory_counters``: trn2, the driver's per-core counters read after a
    synchronize, ``fixtures.rank.probes.device_memory``), every rank has that total too, the
    categories summing to it. Records each rank's figures, the first step's time with the
    compile cache's state beside it (on trn2 the first step is the compile), and on trn2 each
    rank's peaks against its logical core's capacity and its headroom (capacity minus the
    runtime's total)."""
    run, figures = _figures(tier, titan_runs)
    expect(len(figures) == run.world_size, "every rank logged its steps", run.world_size, len(figures), run)
    capacity = tier.device_memory_bytes / 2**30 if tier.device_memory_bytes else None
    recorded = {"run": run.spec.describe(), "compile_cache": run.compile_cache(),
                "warmup_rule": performance.WARMUP_RULE, "core_capacity_gib": capacity, "ranks": {}}
    for rank, fig in sorted(figures.items()):
        recorded["ranks"][rank] = fig.to_json()
        if capacity:
            recorded["ranks"][rank]["peak_of_core_capacity"] = fig.peak_memory_gib / capacity
        if capacity and fig.device_peak_gib is not None:
            recorded["ranks"][rank]["device_headroom_gib"] = capacity - fig.device_peak_gib
    record_property("performance", json.dumps(recorded, sort_keys=True))
    if tier.runtime_memory_counters:
        for rank, fig in sorted(figures.items()):
            errors = sorted({r.get("error") for r in run.probe(probes.device_memory, rank) if r.get("error")})
            expect(fig.device_peak_gib is not None and fig.device_peak_gib > 0,
                   f"rank {rank}: the runtime's device memory is measured (the driver's per-core counters)",
                   "a total > 0 GiB by category", fig.device_peak_gib, run, detail="; ".join(errors))
    for rank, fig in sorted(figures.items()):
        expect(fig.steady, f"rank {rank}: a steady state after the warm-up rule (fixtures.oracles.performance)",
               f">= {performance.MIN_STEADY_STEPS} steady steps", f"{fig.steps - fig.warmup_steps} of "
               f"{fig.steps} (warm-up {fig.warmup_steps} steps)", run)
        for name in ("first_step_s", "step_time_s", "tokens_per_s", "tokens_per_step", "peak_memory_gib"):
            value = getattr(fig, name)
            expect(math.isfinite(value) and value > 0, f"rank {rank}: {name} is measured",
                   "a finite figure > 0", value, run)


def _tokens_per_rank_step(run) -> float:
    """What one step of the run feeds each rank, from its configuration: rows per microbatch x
    sequence length x microbatches per step, over the tensor-parallel degree (torchtitan's
    throughput is per device of a data-parallel replica)."""
    config = run.resolved_config()
    rows, seq_len = training_batch.resolved_batch(config)
    tp = int(config.get("parallelism", {}).get("tensor_parallel_degree", 1) or 1)
    global_rows = config["training"].get("global_batch_size", -1)
    microbatches = 1 if global_rows in (-1, None) else global_rows // (rows * (run.world_size // tp))
    return rows * seq_len * microbatches / tp


def test_throughput_counts_the_tokens_each_step_processed(tier, titan_runs):
    """On every rank, torchtitan's throughput times its step time (the tokens it says one
    steady step processed: it divides those tokens by that time) equals the tokens the run's
    configured batch feeds a rank per step (``_tokens_per_rank_step``) within ``TOKENS_RTOL``. A
    throughput figure that counts other tokens (padding dropped, microbatches missed, another
    rank's) would make tokens/s and an upgrade's comparison of it wrong; the upgrade check then
    compares tokens per step between stacks (``upgrades.perf_compare.work_changed``)."""
    run, figures = _figures(tier, titan_runs)
    expected = _tokens_per_rank_step(run)
    for rank, fig in sorted(figures.items()):
        expect(abs(fig.tokens_per_step - expected) <= performance.TOKENS_RTOL * expected,
               f"rank {rank}: tokens per step (throughput x step time) are the configured batch's",
               expected, fig.tokens_per_step, run,
               detail=f"configured rows x seq_len per rank: {training_batch.resolved_batch(run.resolved_config())}")


def test_device_memory_does_not_grow_in_steady_state(tier, titan_runs):
    """On every rank, the memory's least-squares growth over the steady steps is within the
    tier's leak bound (``TierProfile.performance``: measured by A/A runs of the trusted stack):
    memory that grows every step is a leak long before it is a level. The memory is the
    allocator's allocated bytes where the runtime's counters are read (trn2: a leak served from
    cached free blocks grows them, not the reserved segments, and a new segment is not a leak),
    else the tier's peak figure (cpu: training memory)."""
    run, figures = _figures(tier, titan_runs)
    bound = tier.performance.leak_mib_per_step
    for rank, fig in sorted(figures.items()):
        allocated = fig.allocated_growth_mib_per_step
        growth, what = ((allocated, "allocated device memory") if allocated is not None
                        else (fig.memory_growth_mib_per_step, "peak memory"))
        expect(growth <= bound,
               f"rank {rank}: {what} does not grow per steady step ({tier.performance.why})",
               f"<= {bound} MiB/step", f"{growth:.3f} MiB/step over "
               f"{fig.steps - fig.warmup_steps} steps ({fig.peak_memory_gib:.4g} GiB peak)", run)
