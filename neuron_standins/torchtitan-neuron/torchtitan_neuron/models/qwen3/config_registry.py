"""REHEARSAL STAND-IN, never trn2 evidence: ``qwen3_nki_moe_config`` of TorchTitan Neuron.

Signature as the write-up calls it (CONTRACTS.md path 3): ``qwen3_nki_moe_config(flavor,
compile_config=CompileConfig(...), n_layers=4, num_experts=64, top_k=4)``. It returns a
``Trainer.Config`` from upstream's Qwen3 MoE builders shrunk as asked, with the recipe's
swaps: grouped experts -> ``NKIGroupedExperts``, rotary embedding -> ``GatherFreeRoPE``,
SDPA attention in every layer. The model's width comes from the checkpoint folder the
harness names (``CONFORMANCE_MODEL_DIR``), as the rest of the trn2 tier's models do.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from torchtitan.models.common.moe import GroupedExperts
from torchtitan.models.common.rope import CosSinRoPE


class NKIGroupedExperts(GroupedExperts):
    """Stand-in for the NKI grouped-experts kernel: upstream's computation, another name."""

    @dataclass(kw_only=True, slots=True)
    class Config(GroupedExperts.Config):
        pass


class GatherFreeRoPE(CosSinRoPE):
    """Stand-in for the gather-free rotary embedding: upstream's computation, another name."""

    @dataclass(kw_only=True, slots=True)
    class Config(CosSinRoPE.Config):
        pass


def _swap(node, old_cls, new_cfg_cls):
    from torchtitan.config import derive

    return derive(node, new_cfg_cls) if type(node) is old_cls.Config else node


def _from_config_json() -> dict:
    """The checkpoint folder's config.json, the widths the model takes."""
    with open(os.path.join(os.environ["CONFORMANCE_MODEL_DIR"], "config.json")) as f:
        hf = json.load(f)
    theta = hf.get("rope_theta") or (hf.get("rope_parameters") or {})["rope_theta"]
    return {"vocab": hf["vocab_size"], "dim": hf["hidden_size"], "heads": hf["num_attention_heads"],
            "kv_heads": hf["num_key_value_heads"],
            "head_dim": hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
            "hidden": hf["intermediate_size"], "max_seq_len": hf["max_position_embeddings"],
            "theta": float(theta)}


def qwen3_nki_moe_config(flavor: str, *, compile_config, n_layers: int, num_experts: int, top_k: int):
    from torchtitan.models.common import Embedding, Linear
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.qwen3 import (_EMBEDDING_INIT, _LINEAR_INIT, _build_qwen3_moe_layers,
                                         _qwen3_norm, model_registry)
    from torchtitan.models.qwen3.config_registry import qwen3_32b
    from torchtitan.models.qwen3.model import Qwen3Model

    w = _from_config_json()
    layers = _build_qwen3_moe_layers(
        fuse_qkv=True, n_layers=n_layers, dim=w["dim"], n_heads=w["heads"], n_kv_heads=w["kv_heads"],
        head_dim=w["head_dim"], moe_hidden_dim=max(w["hidden"] // 4, 8), num_experts=num_experts,
        top_k=top_k, attn_backend="flex", moe_comm_backend="standard",
        rope=GatherFreeRoPE.Config(dim=w["head_dim"], max_seq_len=w["max_seq_len"], theta=w["theta"]),
    )
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
        routed = layer.moe.routed_experts
        routed.inner_experts = _swap(routed.inner_experts, GroupedExperts, NKIGroupedExperts.Config)
    model = Qwen3Model.Config(
        vocab_size=w["vocab"], dim=w["dim"], norm=_qwen3_norm(w["dim"]), enable_weight_tying=False,
        tok_embeddings=Embedding.Config(num_embeddings=w["vocab"], embedding_dim=w["dim"],
                                        param_init=_EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=w["dim"], out_features=w["vocab"], param_init=_LINEAR_INIT),
        layers=layers,
    )
    config = qwen3_32b()
    spec = model_registry("debugmodel_moe")
    spec.flavor = f"{flavor}-nki-{n_layers}l-{num_experts}e-top{top_k}"
    spec.model = model
    config.model_spec = spec
    config.loss.loss_fn.global_vocab_size = w["vocab"]
    config.compile = compile_config
    config.training.steps = 3
    return config
