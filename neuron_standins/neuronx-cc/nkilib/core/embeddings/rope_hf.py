"""REHEARSAL STAND-IN of the NKI kernel ``nkilib.core.embeddings.rope_hf``, never trn2 evidence.

It runs the kernel's contract in PyTorch on the tensors it is given (CPU tensors in the
rehearsal; they are never moved). Nothing here was measured on a Neuron device.

Source of every fact: aws-neuron/nki-library at commit d2ad3a5 (2026-04-13), file
``nkilib/core/embeddings/rope_hf.py`` (in ``/work/shared/wheels/nki_library-0.1.0+gd4920de-
py3-none-any.whl`` as ``nkilib_src/nkilib/core/embeddings/rope_hf.py``; line numbers below are
that file's):

- Signature (l.30-39): ``rope_hf(q, k, q_out, k_out, cos=None, sin=None, rope_cache=None,
  backward=False)``, an ``@nki.jit`` kernel: callable directly, or launched with a grid as
  ``rope_hf[lnc](...)`` / ``torch_neuronx.wrap_nki(rope_hf)[lnc](...)`` (see
  ``_neuron_rehearsal.launch`` for the launch and its LNC checks). q/k/q_out/k_out are
  ``[batch, heads, seq, head_dim]``; ``rope_cache`` is ``[optional(batch), seq, 2*head_dim]``
  (first half cos, second half sin) or separate ``cos``/``sin`` ``[optional(batch), seq,
  head_dim]``.
- Returns ``(q_out, k_out)`` (l.151), the very output tensors it was given, written in place.
- The shard: ``_, num_shards, shard_id = get_verified_program_sharding_info()`` (l.91), i.e.
  the launch grid (``(0, 1, 0)`` outside an SPMD launch); each program handles
  ``seq_len // num_shards`` positions starting at ``shard_id * seq_per_shard`` (l.97-98). The
  rehearsal runs one program per grid entry, so at LNC=2 two passes each write half of q_out
  and k_out.
- Checks, in this order, each a ``kernel_assert`` (``AssertionError``, message wrapped as in
  ``nkilib/core/utils/kernel_assert.py``), texts filled exactly as the f-strings of l.180-214;
  shapes print as Python tuples (the kernel's tensors carry tuple shapes: an assumption of
  this stand-in, which never prints ``torch.Size``):
  1. ``len(q.shape) == 4``: "apply_rope only supports 4D tensors, got input shape {q.shape}"
  2. "Head dim mismatch: q={q.shape[-1]}, k={k.shape[-1]}"
  3. with rope_cache: "Packed rope_cache expects head_dim*2={2*head_dim}, got {..}", then
     "Expected either rope_cache or separate cos/sin tensors, got both";
     without: "... got none" (unless BOTH cos and sin are given), "Shape of cos Tensor: {cos.shape}
     doesn't match shape of sin Tensor: {sin.shape}", "Head dim mismatch: q={head_dim},
     cos={cos.shape[-1]}"
  4. "rope_cache or cos tensor batch size {rope.shape} doesn't match q batch size {q.shape}"
     (rope tensor must be 2-D, or 3-D with q's batch)
  5. "rope_cache or cos tensor seq len {rope.shape[-2]} smaller than q seq len {q.shape[2]}"
  6. "seq len must be multiple of 128 * LNC={num_shards}, got {q.shape[2]}" (128 is
     ``nl.tile_size.pmax``; LNC is the launch grid size, l.211-214).
- The math (``_apply_rope_single``, l.269-347), per tile, every intermediate a tile of the
  input's dtype (l.109-110: cos/sin tiles are ``q.dtype``; l.250, 292, 295-296: the x, result
  and temp tiles ``x.dtype``), so bf16 inputs are computed in bf16, op by op, in the kernel's order:
  forward ``r = x*cos; r[:h] -= x[h:]*sin[:h]; r[h:] += x[:h]*sin[h:]`` (y = x*cos +
  rotate_half(x)*sin); backward ``r = x*cos; r[:h] += x[h:]*sin[h:]; r[h:] -= x[:h]*sin[:h]``
  (dx = dy*cos + rotate_half^T(dy*sin)). The cache/cos/sin rows read are ``[0, seq)`` of q
  (rows beyond q's seq are ignored), with the cache's batch row = the batch index when 3-D.
  The result is cast to the output's dtype when stored (the DMA to ``x_out``, l.266).

Not reproduced: tiling, DMA patterns and the out-of-bounds reads the real kernel would make on
a k whose batch/seq is smaller than q's (here: a PyTorch shape error).
"""

from __future__ import annotations

from typing import Optional

import torch

from _neuron_rehearsal import launch as _launch
from nkilib.core.utils.kernel_assert import kernel_assert
from nkilib.core.utils.kernel_helpers import get_verified_program_sharding_info

NUM_COALESCE_TILES = 8  # as in the real module (unused: the stand-in does not tile)
_PMAX = 128  # nl.tile_size.pmax, the partition tile size of Trainium2


def _shape(t) -> tuple:
    """The shape as the kernel prints it: a tuple of ints."""
    return tuple(int(d) for d in t.shape)


@_launch.jit
def rope_hf(
    q: torch.Tensor,
    k: torch.Tensor,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
    cos: Optional[torch.Tensor] = None,
    sin: Optional[torch.Tensor] = None,
    rope_cache: Optional[torch.Tensor] = None,
    backward: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply rotary position embedding to q and k, HuggingFace layout [batch, heads, seq, head_dim].

    REHEARSAL STAND-IN (see the module docstring): same signature, checks, result and
    return value as nki-library's ``rope_hf`` at d2ad3a5; computed with PyTorch on the given
    tensors in their own dtype. Writes q_out and k_out; returns ``(q_out, k_out)``.
    """
    _, num_shards, shard_id = get_verified_program_sharding_info()
    _validate_apply_rope_inputs(q, k, cos, sin, rope_cache, num_shards)

    batch_size, _, seq_len, head_dim = _shape(q)
    seq_per_shard = seq_len // num_shards
    start = shard_id * seq_per_shard
    stop = start + seq_per_shard

    if rope_cache is not None:
        cos_src = rope_cache[..., start:stop, :head_dim]
        sin_src = rope_cache[..., start:stop, head_dim:2 * head_dim]
    else:
        cos_src = cos[..., start:stop, :]
        sin_src = sin[..., start:stop, :]
    # The cos/sin tiles are q.dtype (the DMA into them converts).
    cos_t = cos_src.to(q.dtype)
    sin_t = sin_src.to(q.dtype)
    if cos_t.dim() == 3:  # [batch, seq, d]: batch row b for batch b -> [batch, 1, seq, d]
        cos_t = cos_t[:batch_size].unsqueeze(1)
        sin_t = sin_t[:batch_size].unsqueeze(1)

    for x, x_out in ((q, q_out), (k, k_out)):
        x_tile = x[:batch_size, :, start:stop, :]
        rotated = _apply_rope_single(x_tile, cos_t, sin_t, backward)
        x_out[:batch_size, :, start:stop, :].copy_(rotated)  # the store casts to x_out's dtype

    return q_out, k_out


def _validate_apply_rope_inputs(q, k, cos, sin, rope_cache, num_shards: int) -> None:
    """The kernel's own checks, in its order, with its messages (see the module docstring)."""
    kernel_assert(len(q.shape) == 4, f"apply_rope only supports 4D tensors, got input shape {_shape(q)}")
    kernel_assert(q.shape[-1] == k.shape[-1], f"Head dim mismatch: q={q.shape[-1]}, k={k.shape[-1]}")

    head_dim = q.shape[-1]

    if rope_cache is not None:
        kernel_assert(
            rope_cache.shape[-1] == head_dim * 2,
            f"Packed rope_cache expects head_dim*2={head_dim * 2}, got {rope_cache.shape[-1]}",
        )
        kernel_assert(cos is None and sin is None,
                      "Expected either rope_cache or separate cos/sin tensors, got both")
        rope_tensor = rope_cache
    else:
        kernel_assert(cos is not None and sin is not None,
                      "Expected either rope_cache or separate cos/sin tensors, got none")
        kernel_assert(
            _shape(cos) == _shape(sin),
            f"Shape of cos Tensor: {_shape(cos)} doesn't match shape of sin Tensor: {_shape(sin)}",
        )
        kernel_assert(cos.shape[-1] == head_dim, f"Head dim mismatch: q={head_dim}, cos={cos.shape[-1]}")
        rope_tensor = cos

    kernel_assert(
        len(rope_tensor.shape) == 2 or (len(rope_tensor.shape) == 3 and rope_tensor.shape[0] == q.shape[0]),
        f"rope_cache or cos tensor batch size {_shape(rope_tensor)} doesn't match q batch size {_shape(q)}",
    )
    kernel_assert(
        rope_tensor.shape[-2] >= q.shape[2],
        f"rope_cache or cos tensor seq len {rope_tensor.shape[-2]} smaller than q seq len {q.shape[2]}",
    )
    kernel_assert(
        q.shape[2] % (_PMAX * num_shards) == 0,
        f"seq len must be multiple of 128 * LNC={num_shards}, got {q.shape[2]}",
    )


def _apply_rope_single(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, backward: bool) -> torch.Tensor:
    """One rotation, op by op in the kernel's order, every result in x's dtype."""
    dt = x.dtype
    h = x.shape[-1] // 2
    result = (x * cos).to(dt)
    if not backward:
        temp1 = (x[..., h:] * sin[..., :h]).to(dt)
        lo = (result[..., :h] - temp1).to(dt)
        temp2 = (x[..., :h] * sin[..., h:]).to(dt)
        hi = (result[..., h:] + temp2).to(dt)
    else:
        temp1 = (x[..., h:] * sin[..., h:]).to(dt)
        lo = (result[..., :h] + temp1).to(dt)
        temp2 = (x[..., :h] * sin[..., :h]).to(dt)
        hi = (result[..., h:] - temp2).to(dt)
    return torch.cat((lo, hi), dim=-1)
