"""Triton kernel for :mod:`specpilot.kernels.add_rms_norm`: one program per row, the whole row in
registers (hidden sizes up to a few thousand); the sum is stored rounded and the norm reads the
rounded sum, as the eager ops do."""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start


@triton.jit
def add_rms_norm_kernel(h_ptr, d_ptr, w_ptr, s_ptr, out_ptr, H, eps, weight_offset,
                        BLOCK_H: tl.constexpr, ROUND_FIRST: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_H)
    mask = offs < H
    # the weight first: its load then overlaps the row's, not the reduction after them
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32) + weight_offset
    h = tl.load(h_ptr + row * H + offs, mask=mask, other=0.0)
    d = tl.load(d_ptr + row * H + offs, mask=mask, other=0.0)
    s = (h.to(tl.float32) + d.to(tl.float32)).to(h.dtype)
    tl.store(s_ptr + row * H + offs, s, mask=mask)
    sf = s.to(tl.float32)
    normed = sf * tl.math.rsqrt(tl.sum(sf * sf, axis=0) / H + eps)
    if ROUND_FIRST:
        y = w.to(w_ptr.dtype.element_ty).to(tl.float32) * normed.to(h.dtype).to(tl.float32)
    else:
        y = normed * w
    tl.store(out_ptr + row * H + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def add_rms_norm_triton(h: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float,
                        weight_offset: float, round_first: bool):
    """Same contract as :func:`~specpilot.kernels.add_rms_norm.reference.add_rms_norm_ref`."""
    hidden = h.shape[-1]
    if (delta.shape != h.shape or delta.dtype != h.dtype or weight.shape != (hidden,)
            or (round_first and weight.dtype != h.dtype)):
        raise ValueError(f"add_rms_norm: h {tuple(h.shape)} {h.dtype}, delta "
                         f"{tuple(delta.shape)} {delta.dtype}, weight {tuple(weight.shape)} "
                         f"{weight.dtype} do not match")
    h2, d2 = h.reshape(-1, hidden).contiguous(), delta.reshape(-1, hidden).contiguous()
    s, out = torch.empty_like(h2), torch.empty_like(h2)
    block = triton.next_power_of_2(hidden)
    add_rms_norm_kernel[(h2.shape[0],)](h2, d2, weight, s, out, hidden, eps, weight_offset,
                                        BLOCK_H=block, ROUND_FIRST=round_first,
                                        num_warps=8 if block >= 4096 else 4,
                                        **pdl_launch(h.device))
    return s.view(h.shape), out.view(h.shape)
