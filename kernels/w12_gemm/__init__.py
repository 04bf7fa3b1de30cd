"""Skinny GEMM on W12 weights, decoded in registers: ``out [M, N] = x [M, K] @ W[N, K]^T``.

Engine entry point::

    from specpilot.kernels import w12, w12_gemm
    packed = w12.pack(weight)                 # [N, K] bf16 -> W12Tensor, once at load
    y = w12_gemm.linear(x, packed)            # x [M, K] bf16 -> [M, N] bf16

In the engine, a recipe's ``w12`` weight groups route their Linears here (decode and verify, at
most 64 rows on CUDA): :class:`specpilot.engines.models.layers.W12Weight`.

Escape handling and its summation-order consequence: :mod:`specpilot.kernels.w12_gemm.triton`.
"""

import torch

from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12_gemm.reference import w12_gemm_ref
from specpilot.kernels.w12_gemm.triton import w12_gemm

__all__ = ["linear", "w12_gemm", "w12_gemm_ref"]


def linear(x: torch.Tensor, packed: W12Tensor, config: dict | None = None, *,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 @ ``packed [N, K]``^T -> ``[M, N]`` (``out_dtype``, default bf16).

    ``config`` is a tuning-space entry (``space.py``); None uses the tuned cache, else the default.
    """
    return w12_gemm(x, packed, out_dtype=out_dtype, config=config)
