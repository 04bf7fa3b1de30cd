"""Triton kernel for :mod:`specpilot.kernels.qk_norm_rope`: program (token, head) over the q
heads then the k heads. Each loads its head twice (the second time at each rotary dim's partner,
``i +- R/2``, an L1 hit), norms both with the head's one scale, rounds to the input dtype (the
norm's output in the eager ops), and rotates the first R dims in fp32."""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start


@triton.jit
def normed(x, w, scale, weight_offset, ROUND_FIRST: tl.constexpr):
    """The norm's output (in x's dtype, as fp32) of values ``x`` with weights ``w``."""
    xn = x.to(tl.float32) * scale
    if ROUND_FIRST:
        y = (w.to(tl.float32) + weight_offset).to(w.dtype).to(tl.float32) * \
            xn.to(x.dtype).to(tl.float32)
    else:
        y = xn * (w.to(tl.float32) + weight_offset)
    return y.to(x.dtype).to(tl.float32)


@triton.jit
def qk_norm_rope_kernel(q_ptr, k_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, qo_ptr, ko_ptr, T, HQ, HK,
                        D, R, eps, weight_offset, stride_qb, stride_qt, stride_qh, stride_kb,
                        stride_kt, stride_kh, stride_cb, stride_ct, BLOCK_D: tl.constexpr,
                        ROUND_FIRST: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    token = tl.program_id(0)
    head = tl.program_id(1)
    b, t = (token // T).to(tl.int64), (token % T).to(tl.int64)
    is_q = head < HQ
    if is_q:
        src = q_ptr + b * stride_qb + t * stride_qt + head * stride_qh
        dst = qo_ptr + (token * HQ + head).to(tl.int64) * D
        w_ptr = qw_ptr
    else:
        src = k_ptr + b * stride_kb + t * stride_kt + (head - HQ) * stride_kh
        dst = ko_ptr + (token * HK + head - HQ).to(tl.int64) * D
        w_ptr = kw_ptr
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(src + offs, mask=mask, other=0.0)
    xf = x.to(tl.float32)
    scale = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)
    y = normed(x, tl.load(w_ptr + offs, mask=mask, other=0.0), scale, weight_offset, ROUND_FIRST)
    half = R // 2
    in_rot = offs < R
    partner = tl.where(offs < half, offs + half, offs - half)
    xp = tl.load(src + partner, mask=in_rot, other=0.0)
    yp = normed(xp, tl.load(w_ptr + partner, mask=in_rot, other=0.0), scale, weight_offset,
                ROUND_FIRST)
    rot = tl.where(offs < half, -yp, yp)
    cs = b * stride_cb + t * stride_ct + offs  # cos and sin share their strides
    c = tl.load(cos_ptr + cs, mask=in_rot, other=1.0).to(tl.float32)
    s = tl.load(sin_ptr + cs, mask=in_rot, other=0.0).to(tl.float32)
    out = tl.where(in_rot, y * c + rot * s, y)
    tl.store(dst + offs, out.to(qo_ptr.dtype.element_ty), mask=mask)


def qk_norm_rope_triton(q, k, q_weight, k_weight, eps, cos, sin, weight_offset, round_first):
    """Same contract as :func:`~specpilot.kernels.qk_norm_rope.reference.qk_norm_rope_ref`;
    outputs are contiguous."""
    batch, tokens, hq, dim = q.shape
    hk, rot = k.shape[2], cos.shape[-1]
    if (k.shape[:2] != (batch, tokens) or k.shape[3] != dim or q.stride(3) != 1
            or k.stride(3) != 1 or q_weight.shape != (dim,) or k_weight.shape != (dim,)
            or cos.shape != (batch, tokens, rot) or sin.shape != cos.shape or rot % 2
            or rot > dim or cos.stride(2) != 1 or sin.stride() != cos.stride()
            or (round_first and q_weight.dtype != q.dtype)):
        raise ValueError(f"qk_norm_rope: q {tuple(q.shape)}, k {tuple(k.shape)}, weights "
                         f"{tuple(q_weight.shape)} {tuple(k_weight.shape)}, cos "
                         f"{tuple(cos.shape)} do not match")
    q_out = torch.empty(batch, tokens, hq, dim, dtype=q.dtype, device=q.device)
    k_out = torch.empty(batch, tokens, hk, dim, dtype=k.dtype, device=k.device)
    qk_norm_rope_kernel[(batch * tokens, hq + hk)](
        q, k, q_weight, k_weight, cos, sin, q_out, k_out, tokens, hq, hk, dim, rot, eps,
        weight_offset, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
        k.stride(2), cos.stride(0), cos.stride(1), BLOCK_D=triton.next_power_of_2(dim),
        ROUND_FIRST=round_first, num_warps=2, **pdl_launch(q.device))
    return q_out, k_out
