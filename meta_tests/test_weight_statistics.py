"""The tiny checkpoints carry a trained checkpoint's statistics (fixtures.data.weight_statistics),
not an initialisation's: norm weights far from 1 and rising with depth, matrices at the
published scales, and no parameter left as ``from_config`` made it."""

from __future__ import annotations

import pytest
import torch

from fixtures.data import weight_statistics
from fixtures.rank.model_shapes import TINY

pytestmark = pytest.mark.meta


def _model(tied: bool):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**TINY.to_hf(), tie_word_embeddings=tied))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    weight_statistics.apply(model, TINY.n_layers)
    return model, before


@pytest.mark.parametrize("tied", [True, False])
def test_every_weight_is_redrawn_with_its_published_spread(tied):
    model, before = _model(tied)
    last = TINY.n_layers - 1
    for name, param in model.named_parameters():
        assert not torch.equal(param, before[name]), f"{name} kept its initial values"
        mean, std = weight_statistics._spread_of(name, TINY.n_layers)
        n = param.numel()
        assert abs(param.mean().item() - mean) < 5 * std / n ** 0.5, (name, param.mean().item(), mean)
    norm = dict(model.named_parameters())
    first_norm = norm["model.layers.0.input_layernorm.weight"].mean().item()
    last_norm = norm[f"model.layers.{last}.input_layernorm.weight"].mean().item()
    assert first_norm < 0.2 and last_norm > 1.3, (first_norm, last_norm)  # far from 1, rising with depth


def test_a_parameter_without_a_published_figure_is_refused():
    with pytest.raises(KeyError, match="no published statistic for model.layers.0.mlp.bias"):
        weight_statistics._spread_of("model.layers.0.mlp.bias", 2)


def test_the_same_checkpoint_every_time():
    first, _ = _model(True)
    second, _ = _model(True)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
