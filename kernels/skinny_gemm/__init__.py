"""Skinny bf16 GEMM for decode and verify: ``out [M, N] = x [M, K] @ weight [N, K]^T``, M = 1..64.

Engine entry point::

    from specpilot.kernels import skinny_gemm
    w_qkvg, sizes = skinny_gemm.fuse([w_q, w_k, w_v, w_gate])   # [N_total, K], once at load
    q, k, v, gate = skinny_gemm.linear(x, w_qkvg).split(sizes, dim=-1)
"""

import torch

from specpilot.kernels.skinny_gemm.reference import skinny_gemm_ref
from specpilot.kernels.skinny_gemm.triton import skinny_gemm

__all__ = ["fuse", "linear", "skinny_gemm", "skinny_gemm_ref"]


def linear(x: torch.Tensor, weight: torch.Tensor, config: dict | None = None, *,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 @ ``weight [N, K]``^T -> ``[M, N]`` (``out_dtype``, default bf16) on GPU.

    ``config`` is a tuning-space entry (``space.py``); None uses the tuned cache, else the default.
    """
    return skinny_gemm(x, weight, out_dtype=out_dtype, config=config)


def fuse(weights: list[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """Concatenate projection weights ``[N_i, K]`` sharing one input into ``[sum N_i, K]``.

    Returns the fused weight and the split sizes to ``out.split(sizes, dim=-1)`` the output with.
    """
    if not weights or any(w.dim() != 2 or w.shape[1] != weights[0].shape[1] for w in weights):
        raise ValueError("fuse() needs 2-D weights [N_i, K] with one common K")
    return torch.cat(weights, dim=0).contiguous(), [w.shape[0] for w in weights]
