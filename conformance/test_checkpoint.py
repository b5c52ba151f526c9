"""Weight contracts: HF safetensors in and out of a real training run.

Facts: CONTRACTS.md "Weights" (fine-tune load with ``initial_load_path`` absolute,
``initial_load_in_hf``, ``initial_load_model_only``; export with ``last_save_in_hf``,
``last_save_model_only``; the adapter handles the ``model.`` prefix and the tied embedding;
reading the export back with ``AutoModelForCausalLM`` + ``load_state_dict`` misses only
``lm_head.weight`` when tied) and "What upstream torchtitan 0.3.0 actually does" (no
``config.json`` in the export; a config derived from ``qwen3_32b()`` exports float16; tied
model + untied checkpoint loads silently; untied model + tied checkpoint fails).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
import torch

from fixtures.data import checkpoints, hf_reference
from fixtures.tiers import tier_profile
from fixtures.contract import expect, expect_equal, require_trained
from fixtures.runs.catalogue import (
    LOAD_TIED_CONFIG_DTYPE_EXPORT,
    LOAD_TIED_LR0_EXPORT,
    LOAD_TIED_TRAIN_EXPORT,
    LOAD_UNTIED_LR0_EXPORT,
    TIED_MODEL_UNTIED_CHECKPOINT,
    UNTIED_MODEL_TIED_CHECKPOINT,
    bad_checkpoint_run,
)
from fixtures.runs.spec import Checkpoint, RunSpec

pytestmark = pytest.mark.checkpoint

# Logits of the same float32 weights through transformers and through torchtitan: the two
# implementations order some float32 sums differently (fused qkv, chunked attention), so
# they may differ in the last bits; measured 0.0 on the tiny model.
LOGIT_ATOL = 1e-5


def _manifest(tensors: dict) -> list[list]:
    return [[k, list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sorted(tensors.items())]


@pytest.mark.slow
def test_tied_export_reloads_missing_only_lm_head(titan_runs, record_property):
    """Tied checkpoint in, HF export out, read back with transformers: missing keys exactly
    {lm_head.weight}, none unexpected, and the reloaded lm_head is the embedding."""
    run = require_trained(titan_runs.get(LOAD_TIED_LR0_EXPORT))
    source = titan_runs.checkpoints(Checkpoint.HF_TIED)
    model, result, tensors = hf_reference.reload_with_transformers(run.export_dir(), source)
    record_property("export_manifest", json.dumps(_manifest(tensors)))
    expect_equal("tied export: only lm_head.weight missing", ["lm_head.weight"], sorted(result.missing_keys), run)
    expect_equal("tied export: no unexpected key", [], result.unexpected_keys, run)
    expect(model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
           "the reloaded lm_head is tied to the embedding", "same storage", "separate tensors", run)


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
@pytest.mark.slow
def test_untied_export_reloads_complete(titan_runs, record_property):
    """Untied checkpoint in, export out: nothing missing, nothing unexpected."""
    run = require_trained(titan_runs.get(LOAD_UNTIED_LR0_EXPORT))
    model, result, tensors = hf_reference.reload_with_transformers(
        run.export_dir(), titan_runs.checkpoints(Checkpoint.HF_UNTIED))
    record_property("export_manifest", json.dumps(_manifest(tensors)))
    expect_equal("untied export: no missing, no unexpected key", ([], []),
                 (result.missing_keys, result.unexpected_keys), run)


# torchtitan builds its parameters in float32, and FSDP's mixed precision
# (``training.mixed_precision_param``) casts only the unsharded copy: "The optimizer step uses
# the sharded parameter in the original dtype" (torch FSDP2 ``MixedPrecisionPolicy.param_dtype``,
# torch/distributed/fsdp/_fully_shard/_fsdp_api.py).
PARAMETER_DTYPE = torch.float32


def _bits(tensor: torch.Tensor) -> tuple:
    """A tensor's shape and a digest of its exact bytes (the identity of its values, whatever
    its name; a digest, so no second copy of a 4B model's bytes is held)."""
    return tuple(tensor.shape), hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy()).digest()


@pytest.mark.slow
def test_loaded_model_holds_the_checkpoints_values_bit_for_bit(titan_runs):
    """The model a fine-tune starts from holds every tensor of the safetensors files bit for
    bit, converted exactly to the parameters' dtype (float32): a reader that rounds on load
    (fp32 weights read as bf16, say) fails. Read inside the ranks (every rank's shards after
    one step at learning rate 0, which leaves AdamW's parameters unchanged), put together,
    and matched with the files by content, not by name: torchtitan's state-dict adapter maps
    the names, and it is part of what is under test."""
    run = require_trained(titan_runs.get(LOAD_TIED_LR0_EXPORT))
    source = checkpoints.read_tensors(titan_runs.checkpoints(Checkpoint.HF_TIED))
    loaded = run.final_state()
    dtypes = {str(t.dtype) for t in loaded.values() if t.is_floating_point()}
    expect_equal("the loaded parameters' dtype", {str(PARAMETER_DTYPE)}, dtypes, run)
    held = Counter(_bits(tensor) for tensor in loaded.values())  # a tensor matches once
    expected = {k: v for k, v in source.items() if k != "lm_head.weight"}  # tied: the embedding
    missing = {}
    for name, tensor in sorted(expected.items()):
        want = tensor.to(PARAMETER_DTYPE)
        key = _bits(want)
        if held[key] > 0:
            held[key] -= 1
        else:
            missing[name] = _nearest(want, loaded)
    shown = dict(list(missing.items())[:6])
    expect_equal("every checkpoint tensor is held by the loaded model, bit for bit", {}, shown, run,
                 detail=f"{len(missing)} of {len(expected)} checkpoint tensors not held"
                        + (f" (6 shown; also {sorted(missing)[6:]})" if len(missing) > 6 else "")
                        + f"; {len(loaded)} tensors in the model's state")


def _nearest(want: torch.Tensor, loaded: dict) -> str:
    """What the loaded model holds closest to ``want``: which tensor of the same shape, its
    largest difference, and whether it equals ``want`` rounded to bfloat16 or float16."""
    same = [(k, t) for k, t in loaded.items() if t.shape == want.shape and t.is_floating_point()]
    if not same:
        return "no tensor of this shape"
    name, tensor = min(same, key=lambda kt: (kt[1].float() - want).abs().max().item())
    rounded = [str(d).replace("torch.", "") for d in (torch.bfloat16, torch.float16)
               if torch.equal(tensor.float(), want.to(d).float())]
    return (f"closest {name}: max abs diff {(tensor.float() - want).abs().max().item():.3g}"
            + (f", equal to the checkpoint rounded to {rounded[0]}" if rounded else ""))


@pytest.mark.slow
def test_zero_step_export_equals_source(titan_runs):
    """A run that does not change the weights (1 step at learning rate 0; torchtitan writes
    no export for 0 steps) exports every source tensor bit for bit, under the source's
    names: the ``model.`` prefix is removed on load and restored on export; the tied
    ``lm_head.weight`` is not written."""
    _zero_step_export_equals_source(titan_runs, LOAD_TIED_LR0_EXPORT, Checkpoint.HF_TIED)


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
@pytest.mark.slow
def test_zero_step_untied_export_equals_source(titan_runs):
    """The same for an untied checkpoint: every tensor, ``lm_head.weight`` included."""
    _zero_step_export_equals_source(titan_runs, LOAD_UNTIED_LR0_EXPORT, Checkpoint.HF_UNTIED)


def _zero_step_export_equals_source(titan_runs, spec, which):
    __tracebackhide__ = True
    run = require_trained(titan_runs.get(spec))
    source = checkpoints.read_tensors(titan_runs.checkpoints(which))
    exported = checkpoints.read_tensors(run.export_dir())
    expected_keys = sorted(k for k in source if not (which == Checkpoint.HF_TIED and k == "lm_head.weight"))
    expect_equal("the export has the source's tensor names", expected_keys, sorted(exported), run)
    expect(all(k.startswith("model.") or k == "lm_head.weight" for k in exported),
           "exported names carry HF's model. prefix", "model.*", sorted(exported)[:3], run)
    differing = [k for k in expected_keys if not torch.equal(exported[k], source[k])]
    expect_equal("every exported tensor equals its source, bit for bit", [], differing, run)


@pytest.mark.slow
def test_trained_export_gives_the_trained_models_logits(tier, titan_runs, record_property):
    """After 10 steps, the export read back with transformers gives the logits of the run's
    own final weights (gathered from the shards inside the run, torchtitan's names)."""
    run = require_trained(titan_runs.get(LOAD_TIED_TRAIN_EXPORT))
    source_dir = titan_runs.checkpoints(Checkpoint.HF_TIED)
    final = run.final_state()
    hf_model, result, _ = hf_reference.reload_with_transformers(run.export_dir(), source_dir)
    titan_model = hf_reference.titan_model_from_state(final, source_dir)
    tokens = torch.randint(0, tier.vocab_size, (2, 128), generator=torch.Generator().manual_seed(3))
    err = (hf_reference.logits_of(hf_model, tokens) - hf_reference.logits_of(titan_model, tokens)).abs().max().item()
    record_property("trained_export_max_abs_logit_error", err)
    expect(err <= LOGIT_ATOL, "reloaded export reproduces the trained model's logits",
           f"<= {LOGIT_ATOL}", err, run)
    source = checkpoints.read_tensors(titan_runs.checkpoints(Checkpoint.HF_TIED))
    exported = checkpoints.read_tensors(run.export_dir())
    expect(not torch.equal(exported["model.embed_tokens.weight"], source["model.embed_tokens.weight"]),
           "training changed the weights that were exported", "changed", "identical to the source", run)


@pytest.mark.slow
def test_export_dtype_is_what_the_config_says(titan_runs):
    """The exported dtype is the config's ``checkpoint.export_dtype`` (whatever it is)."""
    run = require_trained(titan_runs.get(LOAD_TIED_CONFIG_DTYPE_EXPORT))
    wanted = json.loads((run.dump_dir / "resolved_config.json").read_text())["checkpoint"]["export_dtype"]
    dtypes = {str(t.dtype).replace("torch.", "") for t in checkpoints.read_tensors(run.export_dir()).values()}
    expect_equal("export dtype equals checkpoint.export_dtype", {wanted}, dtypes, run)


@pytest.mark.slow
def test_float32_training_is_not_silently_downcast_on_export(titan_runs):
    """A float32 run of the write-up's config exports float32 unless the user asked for
    less. Upstream: ``qwen3_32b()``, which the write-up's config starts from only because no
    ``qwen3_4b()`` exists, sets ``export_dtype="float16"``: the export is silently halved."""
    run = require_trained(titan_runs.get(LOAD_TIED_CONFIG_DTYPE_EXPORT))
    dtypes = {str(t.dtype).replace("torch.", "") for t in checkpoints.read_tensors(run.export_dir()).values()}
    expect_equal("a float32 training run exports float32", {"float32"}, dtypes, run)


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
@pytest.mark.slow
def test_tied_model_does_not_silently_drop_untied_lm_head(titan_runs):
    """A tied model loading an untied checkpoint must not drop its ``lm_head.weight``
    silently: the load fails or at least says so. Upstream loads and ignores it."""
    run = titan_runs.get(TIED_MODEL_UNTIED_CHECKPOINT)
    if not run.ok:
        expect("lm_head" in run.log_text(0), "the failure names lm_head.weight", "lm_head", run.log_text(0)[-400:], run)
        return
    said = [l for l in run.log_text(0).splitlines() if "lm_head" in l]
    expect(bool(said), "the run reports that the checkpoint's lm_head.weight was dropped",
           "a log line naming lm_head", "the run trained and said nothing", run)


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
@pytest.mark.slow
def test_untied_model_rejects_tied_checkpoint_clearly(titan_runs):
    """An untied model loading a tied checkpoint fails fast, naming ``lm_head.weight``, with
    no process left behind."""
    run = titan_runs.get(UNTIED_MODEL_TIED_CHECKPOINT)
    expect(not run.ok and not run.timed_out, "the load fails without hanging",
           "a failed run", "ok" if run.ok else "timed out", run)
    log = run.all_logs()
    expect("Missing key in checkpoint state_dict: lm_head.weight" in log, "the error names lm_head.weight",
           "Missing key ... lm_head.weight", log[-600:], run)
    expect_equal("no process is left behind", [], run.launch.leftover_pids, run)


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
@pytest.mark.slow
@pytest.mark.parametrize(("kind", "names"), [
    pytest.param(Checkpoint.BAD_TRUNCATED, "model.safetensors", id="truncated"),
    pytest.param(Checkpoint.BAD_MISSING_SHARD, "model-00002-of-00002.safetensors", id="missing_shard"),
    pytest.param(Checkpoint.BAD_WRONG_SHAPE, "model.layers.0.mlp.up_proj.weight", id="wrong_shape"),
])
def test_bad_checkpoint_fails_fast_naming_the_culprit(titan_runs, kind, names):
    """Straight into torchtitan (the harness's validation off): a broken checkpoint fails the
    run fast, with no hang and no process left behind, and the error names the file or
    tensor at fault."""
    run = titan_runs.get(bad_checkpoint_run(kind))
    expect(not run.ok and not run.timed_out, f"{kind}: the run fails without hanging",
           "a failed run", "ok" if run.ok else "timed out", run)
    expect_equal(f"{kind}: no process is left behind", [], run.launch.leftover_pids, run)
    log = run.all_logs()
    errors = [l for l in log.splitlines() if "Error" in l or "Exception" in l]
    expect(any(names in l for l in errors), f"{kind}: the error names {names}", names, errors[-3:], run)


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
@pytest.mark.parametrize(("kind", "names"), [
    pytest.param(Checkpoint.BAD_TRUNCATED, "model.safetensors: truncated", id="truncated"),
    pytest.param(Checkpoint.BAD_MISSING_SHARD, "names shard model-00002-of-00002.safetensors, which is missing",
                 id="missing_shard"),
    pytest.param(Checkpoint.BAD_WRONG_SHAPE, "tensor model.layers.0.mlp.up_proj.weight has shape [96, 64], "
                 "config.json implies [128, 64]", id="wrong_shape"),
    pytest.param(Checkpoint.BAD_NO_TOKENIZER, "no tokenizer", id="no_tokenizer"),
])
def test_harness_refuses_bad_checkpoint_before_launch(titan_runs, kind, names):
    """The harness validates a checkpoint folder before any rank starts (headers parsed as
    JSON, never unpickled; data coverage; index shards; shapes against config.json; a
    tokenizer) and names the file at fault. Nothing is launched."""
    spec = RunSpec(config="dense_native", steps=1, load=kind)
    with pytest.raises(checkpoints.CheckpointError) as err:
        titan_runs.get(spec)
    expect(names in str(err.value), f"{kind}: the error names the culprit", names, str(err.value))
    expect(titan_runs.run_folder(spec) is None, f"{kind}: nothing was launched",
           "no run folder", titan_runs.run_folder(spec))


@pytest.mark.only_tiers("cpu", reason=tier_profile.TINY_CHECKPOINT_VARIANTS)
def test_missing_config_json_is_reported_when_needed(titan_runs):
    """The native path reads no config.json (its architecture is in the torchtitan config);
    the transformers backend needs one: the validator says so when asked."""
    folder = titan_runs.checkpoints(Checkpoint.BAD_NO_CONFIG)
    checkpoints.validate_hf_dir(folder)  # fine for the native path
    with pytest.raises(checkpoints.CheckpointError, match="config.json is missing"):
        checkpoints.validate_hf_dir(folder, need_config=True)
