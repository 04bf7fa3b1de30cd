"""Attention of decode and verify rows over a slot KV cache, in two kernels.

Eagerly (and compiled) a decode step's attention layer builds a boolean visibility mask from the
slots' positions, then runs SDPA with it: on the H200 that is about eight kernels per layer (mask,
fills, cuDNN's front end and reduction, a copy of the gate) and 19 us for each of Qwen3.8-27B's
16 attention layers (results/h200-2026-11-30-profile-w12-fused-run2.json). Here the mask is
computed from ``cache_pos`` inside a split-slot attention kernel, and a combine kernel applies
the output gate.

Engine entry point::

    from specpilot.kernels import slot_attention
    out = slot_attention.slot_attention(q, kv.k, kv.v, kv.pos, positions, scale, window, gate)
"""

import torch

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.slot_attention.reference import slot_attention_ref

__all__ = ["slot_attention", "slot_attention_ref", "MAX_ROWS", "LAUNCHES"]

# The engine sends decode and verify widths here (at most this many query rows); a prefill keeps
# the mask + SDPA, whose flash kernels suit long query blocks (and the split workspace stays small).
MAX_ROWS = 64
LAUNCHES = 2  # the split pass and the combine


def slot_attention(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                   cache_pos: torch.Tensor, positions: torch.Tensor, scale: float,
                   window: int | None = None, gate: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`slot_attention_ref`'s contract: the Triton kernels on a GPU (or under the
    interpreter), the reference elsewhere."""
    if q.is_cuda or interpreting():
        from specpilot.kernels.slot_attention.triton import slot_attention_triton

        q, cache_k, cache_v, gate = (t if t is None or t.stride(-1) == 1 else t.contiguous()
                                     for t in (q, cache_k, cache_v, gate))
        return slot_attention_triton(q, cache_k, cache_v, cache_pos.contiguous(), positions,
                                     scale, window, gate)
    return slot_attention_ref(q, cache_k, cache_v, cache_pos, positions, scale, window, gate)
