"""Triton kernel for :mod:`specpilot.kernels.stacked_select`: a plain streaming copy.

One program copies ``BLOCK`` elements of one (layer, row) pair; the row's index is read on the
device, so the launch is fixed-shape and capturable in a CUDA graph. torch's ``index_select`` over
the same stacked tensor moved a 27B model's 48 states (150 MB) at about 1.2 TB/s on an H200
(results/h200-2026-11-29-commit-copy.json); a streaming copy should run near the
read+write ceiling.
"""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.launch import cdiv

BLOCK = 4096  # elements per program: 16 KB of fp32 state, 4 x 16 B per thread at 8 warps
NUM_WARPS = 8


@triton.jit
def _select_rows_kernel(src, dst, index, num_rows, row_numel,
                        src_layer_stride, src_row_stride, dst_layer_stride, dst_row_stride,
                        BLOCK: tl.constexpr):
    pair = tl.program_id(0)
    layer = (pair // num_rows).to(tl.int64)
    row = pair % num_rows
    picked = tl.load(index + row).to(tl.int64)
    offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < row_numel
    values = tl.load(src + layer * src_layer_stride + picked * src_row_stride + offsets, mask=mask)
    tl.store(dst + layer * dst_layer_stride + row.to(tl.int64) * dst_row_stride + offsets, values,
             mask=mask)


def select_rows_triton(src: torch.Tensor, index: torch.Tensor, out: torch.Tensor,
                       block: int = BLOCK, num_warps: int = NUM_WARPS) -> torch.Tensor:
    """``out [L, B, ...] = src [L, R, ...][:, index [B]]``; each [l, r] row contiguous in both."""
    num_layers, num_rows = out.shape[:2]
    row_numel = out[0, 0].numel()
    if (src.shape[0] != num_layers or src.shape[2:] != out.shape[2:] or index.shape != (num_rows,)
            or src.dtype != out.dtype or index.stride(0) != 1):
        raise ValueError(f"select_rows: src {tuple(src.shape)} {src.dtype}, index "
                         f"{tuple(index.shape)}, out {tuple(out.shape)} {out.dtype} do not match")
    grid = (num_layers * num_rows, cdiv(row_numel, block))
    _select_rows_kernel[grid](src, out, index, num_rows, row_numel, src.stride(0), src.stride(1),
                              out.stride(0), out.stride(1), BLOCK=block, num_warps=num_warps)
    return out
