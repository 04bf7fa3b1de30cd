"""Triton kernel for :mod:`specpilot.kernels.short_conv`: one launch for the step's prologue.

Program (s, c block): each output row t reads its K window values straight from ``conv_state``
(window positions below K-1) or ``x`` (the rest), sums them times the filter in fp32 in tap order,
rounds to the weight dtype (as the conv's output) and applies SiLU in fp32. Then it writes the
window (the pending rows of a speculative verify) or the new conv state in place
(``COMMIT``: after a barrier, since a program reads state columns its own threads overwrite).
Programs (s, 0) also compute sequence s's gates, one row of heads per token.
"""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start

BLOCK_C = 128
NUM_WARPS = 4


@triton.jit
def window_at(state_row, x_row, offs_c, c_mask, p, stride_sc, stride_xt, K: tl.constexpr):
    """Window column ``p`` (a scalar or a tile of them, broadcast against ``offs_c``): state column
    ``p`` below K-1, else input row ``p - (K-1)``; in the state's dtype."""
    from_state = p < K - 1
    vs = tl.load(state_row + offs_c * stride_sc + p, mask=c_mask & from_state, other=0.0)
    vx = tl.load(x_row + (p - (K - 1)) * stride_xt + offs_c, mask=c_mask & (p >= K - 1),
                 other=0.0)
    return tl.where(from_state, vs, vx.to(vs.dtype))


@triton.jit
def softplus(x):
    """``log(1 + exp(x))`` (x itself above 20, as torch), with log1p done exactly by Goldberg's
    ``y * log(u) / (u - 1)``, ``u = 1 + y``: no cancellation where exp(x) is small."""
    y = tl.exp(tl.minimum(x, 20.0))
    u = 1.0 + y
    exact = u == 1.0  # y below half an fp32 step of 1: log1p(y) = y
    log1p = tl.where(exact, y, tl.log(u) * (y / tl.where(exact, 1.0, u - 1.0)))
    return tl.where(x > 20.0, x, log1p)


@triton.jit
def gates(a_row, b_row, alog_ptr, dtb_ptr, beta_row, g_row, T, HV, stride_at, stride_bt,
          BLOCK_HV: tl.constexpr):
    """One sequence's gates, token by token: ``beta = sigmoid(b)`` (b's dtype), ``g =
    -exp(A_log) * softplus(a + dt_bias)`` (fp32); outputs contiguous [T, HV]."""
    offs_h = tl.arange(0, BLOCK_HV)
    h_mask = offs_h < HV
    decay = -tl.exp(tl.load(alog_ptr + offs_h, mask=h_mask, other=0.0).to(tl.float32))
    bias = tl.load(dtb_ptr + offs_h, mask=h_mask, other=0.0).to(tl.float32)
    for t in range(T):
        av = tl.load(a_row + t * stride_at + offs_h, mask=h_mask, other=0.0).to(tl.float32)
        bv = tl.load(b_row + t * stride_bt + offs_h, mask=h_mask, other=0.0)
        beta = 1.0 / (1.0 + tl.exp(-bv.to(tl.float32)))
        tl.store(beta_row + t * HV + offs_h, beta.to(bv.dtype), mask=h_mask)
        tl.store(g_row + t * HV + offs_h, decay * softplus(av + bias), mask=h_mask)


@triton.jit
def short_conv_silu_kernel(state_ptr, x_ptr, w_ptr, out_ptr, win_ptr, C, T,
                           stride_ss, stride_sc, stride_xs, stride_xt, stride_ws, stride_wc,
                           a_ptr, b_ptr, alog_ptr, dtb_ptr, beta_ptr, g_ptr, HV, stride_as,
                           stride_at, stride_bs, stride_bt,
                           K: tl.constexpr, KP: tl.constexpr, BLOCK_C: tl.constexpr,
                           COMMIT: tl.constexpr, BLOCK_HV: tl.constexpr, PDL: tl.constexpr):
    pdl_start(PDL)
    s = tl.program_id(0).to(tl.int64)
    if tl.program_id(1) == 0:
        gates(a_ptr + s * stride_as, b_ptr + s * stride_bs, alog_ptr, dtb_ptr,
              beta_ptr + s * T * HV, g_ptr + s * T * HV, T, HV, stride_at, stride_bt, BLOCK_HV)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = offs_c < C
    state_row = state_ptr + s * stride_ss
    x_row = x_ptr + s * stride_xs
    out_row = out_ptr + s * T * C
    for t in range(T):
        acc = tl.zeros([BLOCK_C], dtype=tl.float32)
        for k in tl.static_range(K):
            v = window_at(state_row, x_row, offs_c, c_mask, t + k, stride_sc, stride_xt, K)
            w = tl.load(w_ptr + offs_c * K + k, mask=c_mask, other=0.0)
            acc += v.to(tl.float32) * w.to(tl.float32)
        y = acc.to(w_ptr.dtype.element_ty).to(tl.float32)
        y = y / (1.0 + tl.exp(-y))
        tl.store(out_row + t * C + offs_c, y.to(out_ptr.dtype.element_ty), mask=c_mask)
    if not COMMIT:  # the whole window, for the rows that stay pending
        win_row = win_ptr + s * stride_ws + offs_c[:, None] * stride_wc
        for p0 in range(0, K - 1 + T, KP):
            p = p0 + tl.arange(0, KP)[None, :]
            keep = c_mask[:, None] & (p < K - 1 + T)
            v = window_at(state_row, x_row, offs_c[:, None], keep, p, stride_sc, stride_xt, K)
            tl.store(win_row + p, v, mask=keep)
    else:  # the window's last K-1 columns become the state
        j = tl.arange(0, KP)[None, :]
        keep = c_mask[:, None] & (j < K - 1)
        v = window_at(state_row, x_row, offs_c[:, None], keep, T + j, stride_sc, stride_xt, K)
        tl.debug_barrier()  # every thread has read the old columns before any is overwritten
        tl.store(state_row + offs_c[:, None] * stride_sc + j, v, mask=keep)


def conv_silu_gates_triton(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                           commit: bool, window_out: torch.Tensor | None, a: torch.Tensor,
                           b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """Same contract as :func:`~specpilot.kernels.short_conv.reference.conv_silu_gates_ref`; the
    window is only materialised when the rows stay pending (``commit`` False): committing returns
    None for it."""
    num_seqs, num_tokens, channels = x.shape
    kernel = weight.shape[1]
    if (conv_state.shape != (num_seqs, channels, kernel - 1) or weight.shape[0] != channels
            or x.stride(2) != 1 or conv_state.stride(2) != 1 or not weight.is_contiguous()):
        raise ValueError(f"conv_silu_gates: conv_state {tuple(conv_state.shape)}, x "
                         f"{tuple(x.shape)} (strides {x.stride()}), weight {tuple(weight.shape)} "
                         "do not match")
    if commit and num_seqs > 1 and conv_state.stride(0) == 0:
        raise ValueError("conv_silu_gates: cannot commit into an expanded conv state")
    heads = a.shape[2]
    if (a.shape != b.shape or a.shape[:2] != (num_seqs, num_tokens) or a.stride(2) != 1
            or b.stride(2) != 1 or A_log.shape != (heads,) or dt_bias.shape != A_log.shape):
        raise ValueError(f"conv_silu_gates: a {tuple(a.shape)}, b {tuple(b.shape)}, A_log "
                         f"{tuple(A_log.shape)}, dt_bias {tuple(dt_bias.shape)} do not match")
    out = torch.empty(num_seqs, num_tokens, channels, dtype=weight.dtype, device=x.device)
    window = None
    if not commit:
        window = window_out if window_out is not None else conv_state.new_empty(
            num_seqs, channels, kernel - 1 + num_tokens)
        if window.stride(2) != 1:
            raise ValueError("conv_silu_gates: the window buffer's last dim must be contiguous")
    win = window if window is not None else out  # unused when committing
    beta = torch.empty(a.shape, dtype=b.dtype, device=b.device)
    g = torch.empty(a.shape, dtype=torch.float32, device=a.device)
    grid = (num_seqs, cdiv(channels, BLOCK_C))
    short_conv_silu_kernel[grid](
        conv_state, x, weight, out, win, channels, num_tokens, conv_state.stride(0),
        conv_state.stride(1), x.stride(0), x.stride(1), win.stride(0), win.stride(1), a, b, A_log,
        dt_bias, beta, g, heads, a.stride(0), a.stride(1), b.stride(0), b.stride(1), K=kernel,
        KP=triton.next_power_of_2(kernel - 1), BLOCK_C=BLOCK_C, COMMIT=commit,
        BLOCK_HV=triton.next_power_of_2(heads), num_warps=NUM_WARPS, **pdl_launch(x.device))
    return out, window, beta, g
