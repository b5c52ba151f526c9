"""Config shapes as data (``fixtures.rank.titan.config_shapes``): every config function has one,
every catalogue run's config is one of them, each cpu config builds what its entry says, and the
memory and disk plans size a run by its entry, not by its config's name."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.rank.model_shapes import TINY
from fixtures.rank.titan import config_shapes
from fixtures.runs import memory_plan, model_size, session_plan
from fixtures.runs.catalogue import CATALOGUE, MOE_NATIVE, MOE_NATIVE_VALIDATED
from fixtures.tiers import tier_modules, tier_profile
from meta_tests import qwen3_4b

pytestmark = pytest.mark.meta

MODULES = (tier_profile.CPU_MODULE, tier_profile.TRN2_MODULE, tier_profile.CPU_HF_BACKEND_MODULE,
           tier_profile.TRN2_HF_BACKEND_MODULE)


def test_every_config_function_has_a_shape_and_every_shape_a_function():
    """The table and the tier modules' config functions name the same configs."""
    defined = set().union(*(tier_modules.config_functions(m) for m in MODULES))
    assert defined == set(config_shapes.SHAPES), (
        f"without a shape: {sorted(defined - set(config_shapes.SHAPES))}; "
        f"a shape of no config: {sorted(set(config_shapes.SHAPES) - defined)}")


def test_every_catalogue_run_has_a_shape(tmp_path):
    """Every run of the catalogue, on both tiers, names a config the plans can size."""
    for t in (tier_profile.cpu_profile(), qwen3_4b.trn2_tier(tmp_path)):
        for entry in CATALOGUE.entries(t):
            config_shapes.shape_of(CATALOGUE.spec(entry.name, t).config)


def _built(config) -> config_shapes.ConfigShape:
    """What a built torchtitan config is, in the table's terms."""
    ac = config.activation_checkpoint
    recompute = (config_shapes.Recompute.NONE if ac is None else
                 config_shapes.Recompute.FULL if type(ac).__qualname__.startswith("FullAC") else
                 config_shapes.Recompute.SELECTIVE if type(ac).__qualname__.startswith("SelectiveAC") else ac)
    model = getattr(config.model_spec, "model", None)
    layers = getattr(model, "layers", None)
    moe = bool(layers) and any(getattr(layer, "moe", None) is not None for layer in layers)
    chunks = getattr(config.loss, "num_chunks", 1)
    return config_shapes.ConfigShape(moe=moe, recompute=recompute, loss_chunks=chunks), (len(layers) if layers else None)


@pytest.mark.parametrize("name", sorted(config_shapes.SHAPES))
def test_each_cpu_config_builds_what_its_shape_says(name):
    """Built on the cpu tier (the tiny model), a config has its entry's MoE model, activation
    checkpointing and loss chunks, and as many layers as the entry gives the tiny checkpoint."""
    import importlib

    module = next(m for m in (tier_profile.CPU_MODULE, tier_profile.CPU_HF_BACKEND_MODULE)
                  if name in tier_modules.config_functions(m))
    config = getattr(importlib.import_module(f"{module}.config_registry"), name)()
    built, layers = _built(config)
    shape = config_shapes.shape_of(name)
    assert (built.moe, built.recompute, built.loss_chunks) == (shape.moe, shape.recompute, shape.loss_chunks)
    if layers is not None:
        expected = model_size.MOE_LAYERS if shape.moe else config_shapes.dense_layers(shape, TINY.n_layers)
        assert layers == expected


def test_a_config_that_builds_the_moe_model_is_planned_as_moe(tmp_path):
    """``moe_native_validated`` builds the MoE model: its memory and disk are ``moe_native``'s
    (the plans read the shape, not ``config == "moe_native"``, which planned it as dense
    Qwen3-4B: 7.7 GiB a rank instead of 18.4 on 64 ranks)."""
    tier = qwen3_4b.trn2_tier(tmp_path)
    hf = memory_plan.model_config(tier)
    moe = memory_plan.memory_plan(MOE_NATIVE, tier, hf)
    validated = memory_plan.memory_plan(MOE_NATIVE_VALIDATED, tier, hf)
    assert validated.shape.experts == model_size.MOE_EXPERTS
    assert validated.total == moe.total
    # the same run under the other config's name writes the same (its export is the MoE model's)
    renamed = dataclasses.replace(MOE_NATIVE, config="moe_native_validated")
    assert session_plan.launch_disk_bytes(renamed, tier, 64, hf) == session_plan.launch_disk_bytes(MOE_NATIVE, tier, 64, hf)


def test_an_unknown_config_is_named():
    with pytest.raises(config_shapes.UnknownConfig, match="'mystery' has no entry"):
        config_shapes.shape_of("mystery")
