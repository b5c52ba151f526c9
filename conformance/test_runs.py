"""Clean exit: every run the contracts read ends with exit code 0 on every rank.

The contracts that read a run require only that it trained (``require_trained``: every rank
recorded every step and finished its Python program). A rank that then dies in native
teardown ("terminate called without an active exception", SIGABRT) fails this contract,
for that run alone, with the rank, the signal and the threads it still had when Python
finished (the exit marker of ``fixtures.titan.probes``). The expected value is the OS's
exit status of each rank as torchrun reports it, not anything the run writes itself.

The runs listed here are the ones the other contracts already launch on the tier, so this
file adds no launch.
"""

from __future__ import annotations

import pytest

from fixtures import run_definitions as runs
from fixtures.contract import expect_clean_exit

pytestmark = [pytest.mark.runs, pytest.mark.slow]

# Runs every tier's contracts launch and need to train (name -> spec of the tier).
EVERY_TIER = {
    "dense_native": lambda p: runs.DENSE_NATIVE,
    "rank_scaling_two_nodes": runs.two_nodes,
    "rank_scaling_all_ranks": runs.rank_scaling,
    "rank_scaling_fewer_ranks": lambda p: runs.rank_scaling(p, fewer=True),
    "dense_native_kernel_rope": runs.dense_native_kernel_rope,
    "dense_native_compiled": runs.compiled_dense,
    "clipping_compiled": lambda p: runs.clipping_run(p, compiled=True),
    "schedule_and_clip": lambda p: runs.SCHEDULE_AND_CLIP,
    "layers_10_to_19": lambda p: runs.layers_10_to_19(),
    "tensor_parallel": runs.tensor_parallel,
    "tensor_parallel_reference": runs.tensor_parallel_reference,
    "moe_native": lambda p: runs.MOE_NATIVE,
    "load_tied_lr0_export": lambda p: runs.LOAD_TIED_LR0_EXPORT,
    "load_tied_train_export": lambda p: runs.LOAD_TIED_TRAIN_EXPORT,
    "load_tied_config_dtype_export": lambda p: runs.LOAD_TIED_CONFIG_DTYPE_EXPORT,
    "hf_backend_rotary_fixed": lambda p: runs.HF_BACKEND_LOAD_TIED_ROTARY_FIXED,
}
# Runs only the cpu tier launches (its own tiny checkpoint variants and pretraining).
CPU_TIER = {
    "load_untied_lr0_export": lambda p: runs.LOAD_UNTIED_LR0_EXPORT,
    "pretrain": lambda p: runs.PRETRAIN,
    "load_pretrained": lambda p: runs.LOAD_PRETRAINED,
}


@pytest.mark.parametrize("name", sorted(EVERY_TIER))
def test_run_exits_cleanly(platform, titan_runs, name):
    """A run every tier launches trains and then exits with code 0 on every rank."""
    expect_clean_exit(titan_runs.get(EVERY_TIER[name](platform)))


@pytest.mark.only_tiers("cpu", reason="the tiny checkpoint variants and the pretraining run exist only on "
                        "the cpu tier (trn2 loads the model folder it is given)")
@pytest.mark.parametrize("name", sorted(CPU_TIER))
def test_cpu_run_exits_cleanly(platform, titan_runs, name):
    """A run only the cpu tier launches trains and then exits with code 0 on every rank."""
    expect_clean_exit(titan_runs.get(CPU_TIER[name](platform)))
