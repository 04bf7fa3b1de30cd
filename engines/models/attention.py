"""Cached causal self-attention shared by the target families (Qwen3, Qwen3.5 gated attention)."""

import torch
from torch import nn

from specpilot.engines.cache import KVCache
from specpilot.engines.models.layers import apply_rope
from specpilot.engines.models.layers import masked_attention


class CachedAttention(nn.Module):
    """GQA self-attention over a :class:`KVCache`, with per-head q/k norms and (partial) rotary.

    ``output_gate``: q_proj emits [query | gate] per head and the output is multiplied by
    sigmoid(gate) before o_proj (Qwen3.5 gated attention). HF parameter names.
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 norm_cls, eps: float, output_gate: bool = False, bias: bool = False):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.output_gate = output_gate
        q_out = num_heads * head_dim * (2 if output_gate else 1)
        self.q_proj = nn.Linear(hidden_size, q_out, bias=bias)
        self.k_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden_size, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden_size, bias=bias)
        self.q_norm = norm_cls(head_dim, eps)
        self.k_norm = norm_cls(head_dim, eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor, kv: KVCache) -> torch.Tensor:
        """x [B, T, hidden], positions [B, T]; writes this forward's K/V into ``kv``."""
        batch, num_tokens, _ = x.shape
        if self.output_gate:
            q, gate = self.q_proj(x).view(batch, num_tokens, -1, 2 * self.head_dim).chunk(2, dim=-1)
            gate = gate.reshape(batch, num_tokens, -1)
        else:
            q, gate = self.q_proj(x).view(batch, num_tokens, -1, self.head_dim), None
        k = self.k_proj(x).view(batch, num_tokens, -1, self.head_dim)
        v = self.v_proj(x).view(batch, num_tokens, -1, self.head_dim)
        q = apply_rope(self.q_norm(q), cos, sin)
        k = apply_rope(self.k_norm(k), cos, sin)
        kv.write(k, v, positions)
        out = masked_attention(q, kv.k, kv.v, kv.visible(positions), self.head_dim ** -0.5)
        out = out.reshape(batch, num_tokens, -1)
        if gate is not None:
            out = out * torch.sigmoid(gate)
        return self.o_proj(out)
