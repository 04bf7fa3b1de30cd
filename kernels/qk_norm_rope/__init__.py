"""Per-head q/k RMSNorm and rotary embedding of an attention layer, q and k in one kernel.

Eagerly each of q and k is a norm and about six rotary ops; compiled, inductor still splits each
into a reduction and one or two pointwise kernels (six per layer on the H200). One launch here.

Engine entry point::

    from specpilot.kernels import qk_norm_rope
    q, k = qk_norm_rope.qk_norm_rope(q, k, q_norm.weight, k_norm.weight, eps, cos, sin,
                                     weight_offset, round_first)
"""

import torch

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.qk_norm_rope.reference import qk_norm_rope_ref

__all__ = ["qk_norm_rope", "qk_norm_rope_ref"]


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                 k_weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor,
                 weight_offset: float, round_first: bool):
    """:func:`qk_norm_rope_ref`'s contract: the Triton kernel on a GPU (or under the
    interpreter), the reference elsewhere."""
    if q.is_cuda or interpreting():
        from specpilot.kernels.qk_norm_rope.triton import qk_norm_rope_triton

        cos, sin = cos.contiguous(), sin.contiguous()
        return qk_norm_rope_triton(q, k, q_weight, k_weight, eps, cos, sin, weight_offset,
                                   round_first)
    return qk_norm_rope_ref(q, k, q_weight, k_weight, eps, cos, sin, weight_offset, round_first)
