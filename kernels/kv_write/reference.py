"""Torch reference of the KV-cache write (the eager engine's ops)."""

import torch


def kv_write_ref(cache_k: torch.Tensor, cache_v: torch.Tensor, cache_pos: torch.Tensor,
                 k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
    """Store ``k``, ``v`` [B, T, H, D] and ``positions`` [B, T] into slot ``positions % S`` of row
    b of ``cache_k``, ``cache_v`` [B, S, H, D] and ``cache_pos`` [B, S]."""
    slots = positions % cache_pos.shape[1]
    rows = torch.arange(k.shape[0], device=k.device)[:, None].expand_as(slots)
    cache_k[rows, slots] = k
    cache_v[rows, slots] = v
    cache_pos[rows, slots] = positions
