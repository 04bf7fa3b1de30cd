"""Triton kernel for :mod:`specpilot.kernels.gated_rms_norm`: ``BLOCK_R`` rows per program (the
rows are one head wide, 128 values on Qwen3.8-27B), each normed in fp32; the cast points are the
eager ones (the norm and ``weight *`` it round to the input dtype)."""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start

BLOCK_R = 16


@triton.jit
def gated_rms_norm_kernel(x_ptr, gate_ptr, w_ptr, out_ptr, R, D, eps, stride_x, stride_g,
                          BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_D)[None, :]
    mask = (rows < R) & (cols < D)
    w = tl.load(w_ptr + cols, mask=cols < D, other=0.0)
    x = tl.load(x_ptr + rows * stride_x + cols, mask=mask, other=0.0)
    z = tl.load(gate_ptr + rows * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    xf = x.to(tl.float32)
    normed = xf * tl.math.rsqrt(tl.sum(xf * xf, axis=1)[:, None] / D + eps)
    scaled = (w.to(tl.float32) * normed.to(x.dtype).to(tl.float32)).to(w.dtype)
    y = scaled.to(tl.float32) * (z / (1.0 + tl.exp(-z)))
    tl.store(out_ptr + rows * D + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def gated_rms_norm_triton(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor,
                          eps: float) -> torch.Tensor:
    """Same contract as :func:`~specpilot.kernels.gated_rms_norm.reference.gated_rms_norm_ref`
    for 2-D ``x`` and ``gate`` [R, D] whose rows are contiguous; the output is contiguous."""
    rows, dim = x.shape
    if (x.dim() != 2 or gate.shape != x.shape or weight.shape != (dim,) or x.stride(1) != 1
            or gate.stride(1) != 1 or weight.dtype != x.dtype):
        raise ValueError(f"gated_rms_norm: x {tuple(x.shape)} {x.dtype}, gate "
                         f"{tuple(gate.shape)}, weight {tuple(weight.shape)} {weight.dtype} do "
                         "not match")
    out = torch.empty(rows, dim, dtype=x.dtype, device=x.device)
    gated_rms_norm_kernel[(cdiv(rows, BLOCK_R),)](
        x, gate, weight, out, rows, dim, eps, x.stride(0), gate.stride(0), BLOCK_R=BLOCK_R,
        BLOCK_D=triton.next_power_of_2(dim), num_warps=4, **pdl_launch(x.device))
    return out
