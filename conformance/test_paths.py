"""Path contracts: the write-up's native config function builds, and the transformers
modeling backend (path 1) trains the same weights like the native path (path 2).

Facts: CONTRACTS.md "The three paths" and "What upstream torchtitan 0.3.0 actually does"
(``model_registry("4B", attn_backend="sdpa")`` raises ``ValueError``; the backend unties
embedding and lm_head for FSDP and drops ``lm_head.weight`` on export).
"""

from __future__ import annotations

import pytest
import torch

from fixtures.rank import probes
from fixtures.data import checkpoints, hf_reference
from fixtures.contract import expect, expect_close_series, expect_equal, require_trained
from fixtures.runs.catalogue import (
    HF_BACKEND_LOAD_TIED,
    HF_BACKEND_LOAD_TIED_ROTARY_FIXED,
    LOAD_TIED_TRAIN_EXPORT,
)
from fixtures.runs.spec import Checkpoint

pytestmark = pytest.mark.paths

def test_writeup_native_config_builds():
    """The write-up's path-2 model spec, ``model_registry("4B", attn_backend="sdpa")`` from
    ``torchtitan.models.qwen3`` (the write-up's import; on trn2 the installed torchtitan is
    the Neuron fork), builds. Upstream 0.3.0 removed "sdpa" for language models and raises
    ``ValueError``."""
    from torchtitan.models.qwen3 import model_registry

    spec = model_registry("4B", attn_backend="sdpa")
    expect_equal("the write-up's model spec builds", "4B", spec.flavor)


@pytest.mark.slow
def test_backend_sees_the_native_paths_batch(tier, titan_runs):
    """Both paths, same data settings and seed, see the same first batch on every rank.
    (The backend run recomputes its rotary buffer after init: this contract is about data,
    not the known uninitialised-buffer deviation, and must not go red by that memory.)"""
    native = require_trained(titan_runs.get(LOAD_TIED_TRAIN_EXPORT))
    backend = require_trained(titan_runs.get(HF_BACKEND_LOAD_TIED_ROTARY_FIXED))
    for r in range(tier.nproc_per_node):
        a, b = native.probe(probes.batch, r), backend.probe(probes.batch, r)
        expect(torch.equal(a["inputs"], b["inputs"]), f"rank {r}: same first-batch tokens",
               "equal", "different", backend)


@pytest.mark.not_rehearsed(
    "on upstream torchtitan 0.3 the backend's rotary inv_freq is uninitialised memory (the known "
    "deviation this contract names: a strict xfail on the cpu tier); its effect on the losses "
    "(measured 2e-5 to 6e-4 relative) straddles the bf16 tolerance, so a rehearsal would be red "
    "or green by chance")
@pytest.mark.slow
def test_backend_trains_like_the_native_path(tier, titan_runs, record_property):
    """Same HF weights, same batches: the transformers backend's per-step losses equal the
    native path's within the tier's path_rtol, from the first step on."""
    _expect_trains_like_native(tier, titan_runs.get(LOAD_TIED_TRAIN_EXPORT),
                               titan_runs.get(HF_BACKEND_LOAD_TIED), record_property)


def _expect_trains_like_native(tier, native, backend, record_property) -> None:
    """Per step, the backend's loss equals the native path's within the tier's path_rtol;
    the differences are recorded on the test either way."""
    __tracebackhide__ = True
    require_trained(native)
    require_trained(backend)
    diffs = [b.loss - a.loss for a, b in zip(native.steps, backend.steps)]
    record_property("backend_minus_native_losses", repr(diffs))
    expect_close_series(backend.losses(), native.losses(), tier.numerics.path_rtol,
                        "the backend's per-step losses equal the native path's", backend, record_property,
                        detail=f"native run: {native.run_dir}")


@pytest.mark.slow
def test_backend_with_its_rotary_recomputed_trains_like_the_native_path(tier, titan_runs, record_property):
    """With the backend's rotary buffer recomputed after init (the workaround of the known
    deviation), its per-step losses equal the native path's within the tier's path_rtol:
    the rest of path 1 (weights, batches, schedule, loss) trains as path 2 does, and the
    deviation above is the rotary buffer alone."""
    native = titan_runs.get(LOAD_TIED_TRAIN_EXPORT)
    backend = titan_runs.get(HF_BACKEND_LOAD_TIED_ROTARY_FIXED)
    _expect_trains_like_native(tier, native, backend, record_property)
    expect_equal("both paths trained every step", len(native.steps), len(backend.steps), backend)


@pytest.mark.slow
def test_backend_export_round_trip(titan_runs):
    """The backend's HF export passes the native path's key checks: the same tensor names
    as the native export, read back by transformers missing only the tied lm_head. (On the
    run with the rotary buffer recomputed, as above.)"""
    native = require_trained(titan_runs.get(LOAD_TIED_TRAIN_EXPORT))
    backend = require_trained(titan_runs.get(HF_BACKEND_LOAD_TIED_ROTARY_FIXED))
    names = sorted(checkpoints.read_tensors(backend.export_dir()))
    expect_equal("backend export has the native export's tensor names", sorted(checkpoints.read_tensors(native.export_dir())),
                 names, backend)
    model, result, _ = hf_reference.reload_with_transformers(backend.export_dir(), titan_runs.checkpoints(Checkpoint.HF_TIED))
    expect_equal("reloaded backend export misses only the tied lm_head", (["lm_head.weight"], []),
                 (sorted(result.missing_keys), result.unexpected_keys), backend)
