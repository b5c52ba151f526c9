"""REHEARSAL STAND-IN, never trn2 evidence: ``qwen3_nki_moe_config`` of TorchTitan Neuron.

Signature as the write-up calls it (CONTRACTS.md path 3): ``qwen3_nki_moe_config(flavor,
compile_config=CompileConfig(...), n_layers=4, num_experts=64, top_k=4)``. It returns a
``Trainer.Config`` from upstream's Qwen3 MoE builders shrunk as asked, with the recipe's
swaps: grouped experts -> ``NKIGroupedExperts``, rotary embedding -> ``GatherFreeRoPE``
(each computing with code of its own), SDPA attention in every layer. The model's width comes from the checkpoint folder the
harness names (``CONFORMANCE_MODEL_DIR``), as the rest of the trn2 tier's models do.

Written against the torchtitan the fork carries, upstream main at 5059f32c5 (its vintage), not
upstream's newest: every torchtitan name imported here is defined there
(``meta_tests/test_core_pinning.py`` reads them from that snapshot's wheel), and the rehearsal on
that snapshot (``.venv-rehearsal-5059f32``) trains the MoE path with it. torchtitan 0.3.0 still
has them, so the rehearsal on 0.3.0 runs it too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torchtitan.models.common.moe import GroupedExperts
from torchtitan.models.common.rope import CosSinRoPE


class NKIGroupedExperts(GroupedExperts):
    """Stand-in for the NKI grouped-experts kernel. It computes with code of its own, as the
    recipe's replacement does (CONTRACTS.md path 3: "The recipe swaps the grouped-experts
    implementation"), so the swap contract can see which implementation ran: each expert's
    SwiGLU in a loop over experts, in bf16 as upstream's grouped matmul (torchtitan
    ``GroupedExperts.forward``: ``x.bfloat16()`` and bf16 weights), instead of one
    ``torch._grouped_mm``. Looser than the real kernel: CPU arithmetic, no NKI tiling."""

    @dataclass(kw_only=True, slots=True)
    class Config(GroupedExperts.Config):
        pass

    def forward(self, x_RD: torch.Tensor, num_tokens_per_expert_E: torch.Tensor) -> torch.Tensor:
        w1, w2, w3 = (w.to_local() if isinstance(w, DTensor) else w
                      for w in (self.w1_EFD, self.w2_EDF, self.w3_EFD))
        out = torch.zeros(x_RD.shape[0], w2.shape[1], dtype=torch.bfloat16, device=x_RD.device)
        start = 0
        for expert, count in enumerate(num_tokens_per_expert_E.tolist()):
            x = x_RD[start:start + count].bfloat16()
            hidden = F.silu(x @ w1[expert].bfloat16().t()) * (x @ w3[expert].bfloat16().t())
            out[start:start + count] = hidden @ w2[expert].bfloat16().t()
            start += count
        return out.type_as(x_RD)


class GatherFreeRoPE(CosSinRoPE):
    """Stand-in for the gather-free rotary embedding (CONTRACTS.md path 3): the cos/sin rows
    are a slice of the table (positions 0..L-1) or computed from the given positions, never
    gathered by index as upstream's ``CosSinRoPE._reshape_cache`` does. Same values as
    upstream's table (the same float32 products ``position x inv_freq``)."""

    @dataclass(kw_only=True, slots=True)
    class Config(CosSinRoPE.Config):
        pass

    def _reshape_cache(self, query: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        seq_len = query.shape[1]
        if positions is None:
            return self.cache[:seq_len].reshape(1, seq_len, 1, self.cache.shape[-1])
        dim, theta = self.config.dim, self.config.theta
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=positions.device)[: dim // 2].float() / dim))
        angles = positions.float()[..., None] * inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return torch.cat([angles.cos(), angles.sin()], dim=-1).unsqueeze(2)


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
