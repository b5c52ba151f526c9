"""Tensor-parallel contracts: the mesh a TP run builds, and the RoPE kernel wrapper under TP.

Facts: CONTRACTS.md "Topology" (TP degree 1 unless set; sequence parallel is on by default
once TP > 1) and "The NKI RoPE kernel" (not covered by the simple wrapper: tensor parallel,
DTensor inputs). The contract for the wrapper: under TP it either computes the right thing
(parity with the TP run without it) or refuses with an error naming TP/DTensor; never a
wrong answer.
"""

from __future__ import annotations

import pytest

from fixtures.rank import probes
from fixtures.contract import expect, expect_close_series, expect_equal, require_trained
from fixtures.rank.titan.api import detect
from fixtures.runs.catalogue import tensor_parallel, tensor_parallel_dtensor_kernel_rope

pytestmark = pytest.mark.parallel


@pytest.mark.slow
def test_tp_run_builds_fsdp_by_tp_mesh(tier, titan_runs):
    """A TP-2 run over N ranks resolves to FSDP N/2 x TP 2 with sequence parallel on, and
    its parameters are sharded over both mesh dimensions."""
    run = require_trained(titan_runs.get(tensor_parallel(tier)))
    probe = run.probe(probes.parallel, 0)
    world = probe["world_size"]
    dims = probe["parallel_dims"]
    expect_equal("TP 2 x FSDP N/2", (2, world // 2), (dims["tp"], dims["dp_shard"]), run)
    expect_equal("the run built a tp mesh dimension of 2", 2, probe["meshes"].get("tp"), run,
                 detail=f"meshes: {probe['meshes']}")
    expect_equal("sequence parallel is on by default once TP > 1", True, probe["sequence_parallel"], run)
    wqkv = next(p for n, p in probe["parameters"].items() if n.endswith("layers.0._checkpoint_wrapped_module.attention.qkv_linear.wqkv.weight") or n.endswith("layers.0.attention.qkv_linear.wqkv.weight"))
    expect_equal("attention weights are placed over dp_shard and tp", 2, len(wqkv["placements"]), run,
                 detail=str(wqkv))


@pytest.mark.slow
def test_rope_kernel_wrapper_under_tp_is_right_or_refuses(tier, titan_runs, record_property):
    """With the default SPMD backend the wrapper sees each rank's local heads as plain
    tensors; RoPE is per head, so the run must train like TP without the wrapper, within
    the tier's same_math_rtol (cpu: 1e-6, two computations equal in exact arithmetic whose
    rounding depends on the machine's kernel paths: see the tier profile), or, had it got DTensors, fail naming
    tensor parallel.

    Why not bit for bit on cpu (an AMD EPYC AVX-512 machine measured 6.214876174926758
    vs 6.214876651763916 at step 7, equal elsewhere): reproduced on an Intel AVX-512 machine by
    giving MKL its AVX2 code paths under torch's AVX-512 kernels (``MKL_ENABLE_INSTRUCTIONS=AVX2``,
    what MKL takes on a non-Intel CPU). The two TP runs then train bit-identically (the losses
    of steps 8-10 and every grad norm but step 8's are equal, so the weights never part); only
    the reduction that reports step 7's loss (7.7e-8 relative) and step 8's grad norm rounds
    otherwise. Which of its operands' layout or placement the wrapper's contiguous copies move
    was not isolated (an SDPA and a batched matmul on contiguous vs strided q, at the TP=1 and
    TP=2 local shapes, stay bit-equal on both MKL paths). Without TP, and with MKL's own
    AVX-512 paths, the two runs are bit-equal at every step."""
    plain = require_trained(titan_runs.get(tensor_parallel(tier)))
    kernel = titan_runs.get(tensor_parallel(tier, kernel_rope=True))
    if not kernel.ok:
        log = kernel.rank_log_text(0, "stderr")
        expect("tensor parallel" in log and "DTensor" in log,
               "a TP run the wrapper cannot take fails naming tensor parallel / DTensor",
               "TensorParallelUnsupported", log[-500:], kernel)
        return
    expect_close_series(kernel.losses(), plain.losses(), tier.numerics.same_math_rtol,
                        "TP with the kernel RoPE trains as TP without it", kernel, record_property,
                        detail=f"TP run without the override: {plain.run_dir}")


@pytest.mark.slow
def test_rope_kernel_wrapper_refuses_dtensor(tier, titan_runs):
    """Under a DTensor SPMD backend (``partial_dtensor`` on 0.3.0, ``default`` at the fork's
    vintage: ``fixtures.rank.titan.api``), q/k reach the wrapper as DTensors: the run fails with
    the wrapper's error naming tensor parallel and DTensor, not a number."""
    backend = detect().dtensor_tp_backend
    expect(backend is not None, "the installed torchtitan offers a DTensor SPMD backend",
           "partial_dtensor or default", backend)
    run = titan_runs.get(tensor_parallel_dtensor_kernel_rope(tier))
    expect(not run.ok, "the run refuses DTensor q/k", "a failed run", "a run that trained", run)
    log = run.all_logs("stderr")
    expect("TensorParallelUnsupported" in log and "tensor parallel" in log and "DTensor" in log,
           "the failure names tensor parallel and DTensor", "TensorParallelUnsupported: ... DTensor ...",
           log[-800:], run)
