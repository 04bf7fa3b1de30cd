"""Torch reference of the Gated-DeltaNet output norm (the eager ops, HF cast points)."""

import torch
import torch.nn.functional as F


def gated_rms_norm_ref(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor,
                       eps: float) -> torch.Tensor:
    """``(weight * norm(x).to(dtype) * silu(gate.float())).to(dtype)`` over the last dim."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * xf.to(x.dtype) * F.silu(gate.float())).to(x.dtype)
