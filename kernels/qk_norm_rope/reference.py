"""Torch reference of the attention's per-head q/k norm and rotary embedding (the eager ops)."""

import torch


def norm_rope_ref(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor,
                  sin: torch.Tensor, weight_offset: float, round_first: bool) -> torch.Tensor:
    """RMSNorm of each head of ``x`` [B, T, H, D] over D (conventions as
    :func:`specpilot.kernels.add_rms_norm.reference.add_rms_norm_ref`), then the rotary embedding
    of its first R dims (``cos``, ``sin`` [B, T, R], halves repeated: HF layout)."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if round_first:
        normed = (weight + weight_offset) * normed.to(x.dtype)
    else:
        normed = (normed * (weight_offset + weight.float())).to(x.dtype)
    rot = cos.shape[-1]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    x_rot, x_pass = normed[..., :rot], normed[..., rot:]
    x1, x2 = x_rot.chunk(2, dim=-1)
    x_rot = x_rot * c + torch.cat((-x2, x1), dim=-1) * s
    return torch.cat((x_rot, x_pass), dim=-1)


def qk_norm_rope_ref(q, k, q_weight, k_weight, eps, cos, sin, weight_offset, round_first):
    """``(norm_rope(q), norm_rope(k))`` with each its own norm weight."""
    return (norm_rope_ref(q, q_weight, eps, cos, sin, weight_offset, round_first),
            norm_rope_ref(k, k_weight, eps, cos, sin, weight_offset, round_first))
