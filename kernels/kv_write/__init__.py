"""KV-cache write in one kernel: k, v and their positions into each row's slots.

Eagerly the write is five kernels per attention layer and step (the slot's ``%``, the row
``arange``, three ``index_put``); a decode step of Qwen3.8-27B runs 16 of them
(results/h200-2026-11-30-profile-qwen38-27b-ar-w12.json).

Engine entry point::

    from specpilot.kernels import kv_write
    kv_write.kv_write(cache.k, cache.v, cache.pos, k, v, positions)
"""

import torch

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.kv_write.reference import kv_write_ref

__all__ = ["kv_write", "kv_write_ref"]


def kv_write(cache_k: torch.Tensor, cache_v: torch.Tensor, cache_pos: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
    """:func:`kv_write_ref`'s contract: the Triton kernel on a GPU (or under the interpreter) when
    the heads of each row are contiguous (k and v are made so), the reference elsewhere."""
    if (k.is_cuda or interpreting()) and cache_k.stride(3) == 1 \
            and cache_k.stride(2) == cache_k.shape[3] and cache_v.stride() == cache_k.stride() \
            and cache_pos.stride(1) == 1:
        from specpilot.kernels.kv_write.triton import kv_write_triton

        k, v = (t if t.stride(3) == 1 and t.stride(2) == t.shape[3] else t.contiguous()
                for t in (k, v))
        return kv_write_triton(cache_k, cache_v, cache_pos, k, v, positions)
    return kv_write_ref(cache_k, cache_v, cache_pos, k, v, positions)
