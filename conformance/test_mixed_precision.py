"""Mixed-precision contracts: FSDP holds the policy the configuration asks for.

Facts: torchtitan's ``training.mixed_precision_param`` and ``training.mixed_precision_reduce``
(``config/configs.py``: the dtype FSDP gathers parameters in for compute, and the dtype it
reduces gradients in; defaults bfloat16 and float32) become FSDP2's ``MixedPrecisionPolicy``
on every module ``fully_shard`` wraps (``models/*/parallelize.py``). The cpu tier trains in
float32 throughout (gloo has no bf16 mixed precision: ``fixtures.rank.titan.cpu_qwen3``); the
trn2 tier keeps torchtitan's bf16 compute with float32 reduction and storage. The expected
dtypes are the configuration's (what the user asked for), the actual ones what FSDP holds
inside the run (``probes.mixed_precision``).
"""

from __future__ import annotations

import pytest

from fixtures.contract import expect, require_trained
from fixtures.rank import probes
from fixtures.runs.catalogue import DENSE_NATIVE

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
