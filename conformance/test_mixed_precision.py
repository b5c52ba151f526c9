"""Mixed-precision contracts: FSDP holds the policy the configuration asks for.

Facts: torchtitan's ``training.mixed_precision_param`` and ``training.mixed_precision_reduce``
(``config/configs.py``: the dtype FSDP gathers parameters in for compute, and the dtype it
reduces gradients in; defaults bfloat16 and float32) become FSDP2's ``MixedPrecisionPolicy``
on every module ``fully_shard`` wraps (``models/*/parallelize.py``). The cpu tier's configs
compute in float32 (its contracts compare with float32 references: ``TierProfile.compute_dtype``)
and it runs bf16 compute in a run of its own; the trn2 tier keeps torchtitan's bf16 compute with
float32 reduction and storage. The expected dtypes are the configuration's (what the user asked
for), the actual ones what FSDP holds inside the run (``probes.mixed_precision``) and what its
collectives carried (``probes.collectives``).
"""

from __future__ import annotations

import pytest

from fixtures.contract import expect, require_trained
from fixtures.rank import probes
from fixtures.runs.catalogue import DENSE_NATIVE, bf16_mixed_precision

pytestmark = [pytest.mark.precision, pytest.mark.slow]


def test_fsdp_holds_the_configured_mixed_precision_policy(tier, titan_runs):
    """On every rank, every module FSDP shards (each transformer block and the root) holds the
    configured policy: parameters gathered for compute in ``mixed_precision_param``, gradients
    reduced in ``mixed_precision_reduce``; and every parameter is stored in float32 (FSDP's
    sharded master copy: bf16 storage would lose the small updates AdamW makes). A trainer that
    ignores either setting, or reduces in the compute dtype, shows here by module name."""
    run = require_trained(titan_runs.get(DENSE_NATIVE))
    training = run.resolved_config()["training"]
    want = {"param_dtype": training["mixed_precision_param"], "reduce_dtype": training["mixed_precision_reduce"]}
    for rank in range(run.world_size):
        modules = run.probe(probes.mixed_precision, rank)["modules"]
        expect(len(modules) > 1, f"rank {rank}: FSDP wraps the root and the blocks", "> 1 module", sorted(modules), run)
        wrong = {name: {k: held.get(k) for k in want} for name, held in modules.items()
                 if any(held.get(k) != v for k, v in want.items())}
        expect(not wrong, f"rank {rank}: every FSDP module holds the configured mixed-precision policy",
               want, wrong, run, detail=f"{len(wrong)} of {len(modules)} modules differ")
        stored = {name: held["stored_dtypes"] for name, held in modules.items() if held["stored_dtypes"] != ["float32"]}
        expect(not stored, f"rank {rank}: every sharded parameter is stored in float32", "float32 everywhere",
               stored, run)


def _dtypes_by_kind(calls: list[dict]) -> dict[str, dict[str, int]]:
    """Calls per dtype, for the reduce-scatters and the all-gathers (any of torch's spellings)."""
    found: dict[str, dict[str, int]] = {"reduce_scatter": {}, "all_gather": {}}
    for call in calls:
        kind = next((k for k in found if call["collective"].startswith(k)), None)
        if kind is not None:
            found[kind][call["dtype"]] = found[kind].get(call["dtype"], 0) + call["calls"]
    return found


def test_bf16_training_reduces_gradients_and_gathers_parameters_in_the_configured_dtypes(tier, titan_runs):
    """In a run computing in bf16 with float32 reduction (torchtitan's defaults: the trn2 tier's
    own run; on cpu the write-up's run's first two steps so configured), on every rank, every
    reduce-scatter of the first step (FSDP2's gradient reduction) carried tensors of
    ``mixed_precision_reduce`` and every all-gather (parameters gathered for compute) tensors of
    ``mixed_precision_param``. The policy contract reads what FSDP holds; this one what its
    collectives carried: a torch that keeps the policy but reduces gradients in the compute
    dtype (bf16 sums lose the low bits float32 reduction keeps) shows only here. Expected: the
    configuration's dtypes; actual: every ``torch.distributed`` collective the first step called
    (``probes.collectives``)."""
    run = require_trained(titan_runs.get(bf16_mixed_precision(tier)))
    training = run.resolved_config()["training"]
    param, reduce = training["mixed_precision_param"], training["mixed_precision_reduce"]
    expect(param == "bfloat16" and reduce == "float32", "the run computes in bf16 and reduces in float32 "
           "(the case this contract is about)", "bfloat16 / float32", f"{param} / {reduce}", run)
    for rank in range(run.world_size):
        calls = run.probe(probes.collectives, rank)["calls"]
        carried = _dtypes_by_kind(calls)
        expect(sum(carried["reduce_scatter"].values()) > 0 and sum(carried["all_gather"].values()) > 0,
               f"rank {rank}: the first step reduce-scattered gradients and all-gathered parameters",
               "both", calls, run)
        expect(set(carried["reduce_scatter"]) == {reduce}, f"rank {rank}: every gradient reduce-scatter "
               f"carried {reduce} (mixed_precision_reduce)", {reduce: "every call"}, carried["reduce_scatter"], run)
        expect(set(carried["all_gather"]) == {param}, f"rank {rank}: every parameter all-gather carried {param} "
               "(mixed_precision_param)", {param: "every call"}, carried["all_gather"], run)
