"""Skinny GEMM on W12 weights whose planes are in fragment order (``w12.pack(w, order="frag")``),
decoded in registers: ``out [M, N] = x [M, K] @ W[N, K]^T``.

Engine entry point::

    from specpilot.kernels import w12, w12f_gemm
    packed = w12.pack(weight, order="frag")   # [N, K] bf16 -> W12Tensor, once at load
    y = w12f_gemm.linear(x, packed)           # x [M, K] bf16 -> [M, N] bf16

A recipe with ``w12_order: frag`` routes its W12 Linears here
(:class:`specpilot.engines.models.layers.W12Weight`). Kernels and measurements:
:mod:`specpilot.kernels.w12f_gemm.triton`.
"""

import torch

from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12f_gemm.reference import w12f_gemm_ref
from specpilot.kernels.w12f_gemm.triton import w12f_gemm

__all__ = ["linear", "w12f_gemm", "w12f_gemm_ref"]


def linear(x: torch.Tensor, packed: W12Tensor, config: dict | None = None, *,
           out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 @ ``packed [N, K]``^T -> ``[M, N]`` (``out_dtype``, default bf16).

    ``config`` is a tuning-space entry (``space.py``); None uses the tuned cache, else the default.
    """
    return w12f_gemm(x, packed, out_dtype=out_dtype, config=config)
