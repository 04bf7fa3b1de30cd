"""Torch reference of the residual add + RMSNorm (the eager engine's ops, HF cast points)."""

import torch


def add_rms_norm_ref(h: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float,
                     weight_offset: float, round_first: bool):
    """``s = h + delta`` (rounded to h's dtype), then ``(s, norm(s))`` with ``norm`` over the last
    dim, computed in fp32:

    - ``round_first`` False: ``(s_n * (weight_offset + weight)).to(dtype)`` with ``s_n = s *
      rsqrt(mean(s^2) + eps)`` (Qwen3.5's zero-centered norm: offset 1);
    - ``round_first`` True: ``weight * s_n.to(dtype)`` (Qwen3's RMSNorm; offset 0).
    """
    s = h + delta
    sf = s.float()
    normed = sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps)
    if round_first:
        return s, (weight + weight_offset) * normed.to(s.dtype)
    return s, (normed * (weight_offset + weight.float())).to(s.dtype)
