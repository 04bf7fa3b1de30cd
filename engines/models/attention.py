"""Cached causal self-attention shared by the target families (Qwen3, Qwen3.5 gated attention)."""

import torch

from specpilot.engines.cache import KVCache
from specpilot.engines.models.layers import Fusable
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import MergedLinear
from specpilot.engines.models.layers import apply_rope
from specpilot.engines.models.layers import masked_attention
from specpilot.engines.models.layers import sigmoid_gate
from specpilot.kernels.qk_norm_rope import qk_norm_rope
from specpilot.kernels.slot_attention import MAX_ROWS
from specpilot.kernels.slot_attention import slot_attention


class CachedAttention(Fusable):
    """GQA self-attention over a :class:`KVCache`, with per-head q/k norms and (partial) rotary.

    ``output_gate``: q_proj emits [query | gate] per head and the output is multiplied by
    sigmoid(gate) before o_proj (Qwen3.5 gated attention). q/k/v run as one merged GEMM
    (``qkv_proj``); the checkpoint's q_proj/k_proj/v_proj load into its row blocks. Fused, q and
    k are normed and rotated by one kernel, the KV write is one, and the masked attention and
    gate two (:mod:`specpilot.kernels.slot_attention`; a tree view keeps the mask and SDPA).
    """

    def __init__(self, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 norm_cls, eps: float, output_gate: bool = False, bias: bool = False):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.output_gate = output_gate
        q_out = num_heads * head_dim * (2 if output_gate else 1)
        kv_out = num_kv_heads * head_dim
        self.qkv_proj = MergedLinear(hidden_size, {"q_proj": q_out, "k_proj": kv_out,
                                                   "v_proj": kv_out}, bias=bias)
        self.o_proj = Linear(num_heads * head_dim, hidden_size, bias=bias)
        self.q_norm = norm_cls(head_dim, eps)
        self.k_norm = norm_cls(head_dim, eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                positions: torch.Tensor, kv: KVCache) -> torch.Tensor:
        """x [B, T, hidden], positions [B, T]; writes this forward's K/V into ``kv``."""
        batch, num_tokens, _ = x.shape
        q, k, v = self.qkv_proj.forward_split(x)
        if self.output_gate:
            q, gate = q.reshape(batch, num_tokens, -1, 2 * self.head_dim).chunk(2, dim=-1)
        else:
            q, gate = q.reshape(batch, num_tokens, -1, self.head_dim), None
        k = k.reshape(batch, num_tokens, -1, self.head_dim)
        v = v.reshape(batch, num_tokens, -1, self.head_dim)
        if self.fused:
            norm = self.q_norm  # k_norm: the same kind and eps
            q, k = qk_norm_rope(q, k, self.q_norm.weight, self.k_norm.weight, norm.eps, cos, sin,
                                norm.weight_offset, norm.round_first)
        else:
            q, k = apply_rope(self.q_norm(q), cos, sin), apply_rope(self.k_norm(k), cos, sin)
        kv.write(k, v, positions, fused=self.fused)
        return self.o_proj(cache_attention(self, q, kv, positions, gate))


def cache_attention(block: Fusable, q: torch.Tensor, kv: KVCache, positions: torch.Tensor,
                    gate: torch.Tensor | None) -> torch.Tensor:
    """Attention of q [B, T, Hq, D] over ``kv`` with the optional output gate [B, T, Hq, D]
    (``out * sigmoid(gate)``); returns [B, T, Hq * D]. A fused ``block`` at decode and verify
    widths runs :mod:`specpilot.kernels.slot_attention` (two kernels); otherwise (prefill, a
    tree view, eager) the visibility mask, SDPA and the gate."""
    batch, num_tokens, _, head_dim = q.shape
    scale = head_dim ** -0.5
    if block.fused and kv.tree is None and batch * num_tokens <= MAX_ROWS:
        out = slot_attention(q, kv.k, kv.v, kv.pos, positions, scale, kv.window, gate)
        return out.reshape(batch, num_tokens, -1)
    out = masked_attention(q, kv.k, kv.v, kv.visible(positions, op=block.op), scale)
    out = out.reshape(batch, num_tokens, -1)
    if gate is not None:
        out = block.op(sigmoid_gate)(out, gate.reshape(batch, num_tokens, -1))
    return out
