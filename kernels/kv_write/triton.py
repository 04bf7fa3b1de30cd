"""Triton kernel for :mod:`specpilot.kernels.kv_write`: program (b * T + t, head chunk) reads row
t's position, copies its k and v heads into the slot and the position into the slot's position."""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start


@triton.jit
def kv_write_kernel(ck_ptr, cv_ptr, cpos_ptr, k_ptr, v_ptr, pos_ptr, T, S, HD,
                    stride_ckb, stride_cks, stride_cvb, stride_cvs, stride_pb, stride_kb,
                    stride_kt, stride_vb, stride_vt, stride_qb, stride_qt,
                    BLOCK: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    row = tl.program_id(0).to(tl.int64)  # b * T + t: grid axis 0 has no 65535 cap
    b, t = row // T, row % T
    p = tl.load(pos_ptr + b * stride_qb + t * stride_qt)
    slot = p % S
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HD
    k = tl.load(k_ptr + b * stride_kb + t * stride_kt + offs, mask=mask)
    v = tl.load(v_ptr + b * stride_vb + t * stride_vt + offs, mask=mask)
    tl.store(ck_ptr + b * stride_ckb + slot * stride_cks + offs, k, mask=mask)
    tl.store(cv_ptr + b * stride_cvb + slot * stride_cvs + offs, v, mask=mask)
    if tl.program_id(1) == 0:
        tl.store(cpos_ptr + b * stride_pb + slot, p)


def kv_write_triton(cache_k: torch.Tensor, cache_v: torch.Tensor, cache_pos: torch.Tensor,
                    k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
    """Same contract as :func:`~specpilot.kernels.kv_write.reference.kv_write_ref`; each row's
    and slot's heads must be contiguous (``[H, D]`` with unit strides inside)."""
    batch, tokens, heads, dim = k.shape
    for name, t in (("cache_k", cache_k), ("cache_v", cache_v), ("k", k), ("v", v)):
        if t.stride(3) != 1 or t.stride(2) != dim:
            raise ValueError(f"kv_write: {name} {tuple(t.shape)} strides {t.stride()} are not "
                             "contiguous inside a row's heads")
    if (v.shape != k.shape or cache_k.shape[2:] != k.shape[2:] or cache_v.shape != cache_k.shape
            or cache_pos.shape != cache_k.shape[:2] or positions.shape != (batch, tokens)
            or cache_pos.stride(1) != 1):
        raise ValueError(f"kv_write: cache {tuple(cache_k.shape)}, pos {tuple(cache_pos.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}, positions "
                         f"{tuple(positions.shape)} do not match")
    hd = heads * dim
    block = min(triton.next_power_of_2(hd), 4096)
    grid = (batch * tokens, cdiv(hd, block))
    kv_write_kernel[grid](cache_k, cache_v, cache_pos, k, v, positions, tokens,
                          cache_pos.shape[1], hd, cache_k.stride(0), cache_k.stride(1),
                          cache_v.stride(0), cache_v.stride(1), cache_pos.stride(0), k.stride(0),
                          k.stride(1), v.stride(0), v.stride(1), positions.stride(0),
                          positions.stride(1), BLOCK=block, num_warps=4,
                          **pdl_launch(k.device))
