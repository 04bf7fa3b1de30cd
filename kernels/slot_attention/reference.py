"""Torch reference of attention over a slot KV cache (what the eager engine computes)."""

import torch


def slot_attention_ref(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                       cache_pos: torch.Tensor, positions: torch.Tensor, scale: float,
                       window: int | None = None, gate: torch.Tensor | None = None) -> torch.Tensor:
    """GQA attention of queries ``q`` [B, T, Hq, D] at ``positions`` [B, T] over row b's slots of
    ``cache_k``, ``cache_v`` [B, S, Hkv, D] whose positions are ``cache_pos`` [B, S] (-1: empty).

    A slot is visible to a query when ``0 <= pos <= q_pos`` (and ``q_pos - pos < window``). fp32
    softmax; a query that sees no slot gets zeros. With ``gate`` [B, T, Hq, D] the output, rounded
    to q's dtype, is multiplied by ``sigmoid(gate)`` in fp32 (Qwen3.5 / Muse-Glimmer's output gate).
    Returns [B, T, Hq, D] in q's dtype.
    """
    batch, tokens, heads, dim = q.shape
    group = heads // cache_k.shape[2]
    key_pos, q_pos = cache_pos[:, None, :], positions[:, :, None]
    visible = (key_pos >= 0) & (key_pos <= q_pos)  # [B, T, S]
    if window is not None:
        visible &= (q_pos - key_pos) < window
    k = cache_k.float().repeat_interleave(group, dim=2).transpose(1, 2)  # [B, Hq, S, D]
    v = cache_v.float().repeat_interleave(group, dim=2).transpose(1, 2)
    scores = q.float().transpose(1, 2) @ k.transpose(-1, -2) * scale  # [B, Hq, T, S]
    scores = scores.masked_fill(~visible[:, None], float("-inf"))
    peak = scores.amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)
    weights = torch.exp(scores - peak)
    total = weights.sum(-1, keepdim=True)
    out = (weights @ v) / torch.where(total > 0, total, 1.0)  # empty rows: 0 / 1
    out = out.transpose(1, 2).to(q.dtype)
    if gate is not None:
        out = (out.float() * torch.sigmoid(gate.float())).to(q.dtype)
    return out
