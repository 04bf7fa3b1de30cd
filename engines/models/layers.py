"""Building blocks shared by the model families: norms, rotary embedding, masked attention, MLP.

Every block mirrors the numerics of its HF counterpart (cast points included) so that our logits
match transformers in float32 and stay faithful in bf16.
"""

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Qwen3-style RMSNorm: ``w * norm(x).to(dtype)``; weight initialised to 1."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class ZeroCenteredRMSNorm(nn.Module):
    """Qwen3.5 RMSNorm with the ``(1 + w)`` convention, computed in fp32; weight initialised to 0."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """Gated-DeltaNet output norm: ``w * norm(x) * silu(gate)``; weight initialised to 1."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        out = self.weight * xf.to(dtype)
        return (out * F.silu(gate.float())).to(dtype)


class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with HF parameter names."""

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rope_inv_freq(theta: float, rotary_dim: int) -> torch.Tensor:
    """Inverse frequencies of the default rotary embedding over ``rotary_dim`` dims: [rotary_dim // 2]."""
    return 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype):
    """cos/sin for integer ``positions`` [B, T]: each [B, T, rotary_dim] (halves repeated, HF layout)."""
    freqs = positions[..., None].float() * inv_freq.to(positions.device)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of x [B, T, H, D]; the rest pass through (partial rotary)."""
    rot = cos.shape[-1]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    x_rot = x_rot * cos + _rotate_half(x_rot) * sin
    return torch.cat((x_rot, x_pass), dim=-1) if x_pass.shape[-1] else x_rot


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """Attention with an explicit boolean mask.

    Args:
        q: [B, T, Hq, D]; k, v: [B, S, Hkv, D] (GQA: Hq a multiple of Hkv); mask: [B, T, S] True = visible.
    Returns:
        [B, T, Hq, D]
    """
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask[:, None],
        scale=scale, enable_gqa=q.shape[2] != k.shape[2],
    )
    return out.transpose(1, 2)
