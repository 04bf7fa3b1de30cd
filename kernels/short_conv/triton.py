"""Triton kernel for :mod:`specpilot.kernels.short_conv`: one launch for the conv step.

Program (s, c block): each output row t reads its K window values straight from ``conv_state``
(window positions below K-1) or ``x`` (the rest), sums them times the filter in fp32 in tap order,
rounds to the weight dtype (as the conv's output) and applies SiLU in fp32. Then it writes the
window (``KEEP``: the pending rows of a speculative verify) or the new conv state in place
(``COMMIT``: after a barrier, since a program reads state columns its own threads overwrite).
"""

import torch
import triton
import triton.language as tl
from specpilot.kernels.common.launch import cdiv

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
def short_conv_silu_kernel(state_ptr, x_ptr, w_ptr, out_ptr, win_ptr, C, T,
                           stride_ss, stride_sc, stride_xs, stride_xt, stride_ws, stride_wc,
                           K: tl.constexpr, KP: tl.constexpr, BLOCK_C: tl.constexpr,
                           COMMIT: tl.constexpr, KEEP: tl.constexpr):
    s = tl.program_id(0).to(tl.int64)
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
    if KEEP:  # the whole window, for the rows that stay pending
        win_row = win_ptr + s * stride_ws + offs_c[:, None] * stride_wc
        for p0 in range(0, K - 1 + T, KP):
            p = p0 + tl.arange(0, KP)[None, :]
            keep = c_mask[:, None] & (p < K - 1 + T)
            v = window_at(state_row, x_row, offs_c[:, None], keep, p, stride_sc, stride_xt, K)
            tl.store(win_row + p, v, mask=keep)
    if COMMIT:  # the window's last K-1 columns become the state
        j = tl.arange(0, KP)[None, :]
        keep = c_mask[:, None] & (j < K - 1)
        v = window_at(state_row, x_row, offs_c[:, None], keep, T + j, stride_sc, stride_xt, K)
        tl.debug_barrier()  # every thread has read the old columns before any is overwritten
        tl.store(state_row + offs_c[:, None] * stride_sc + j, v, mask=keep)


def short_conv_silu_triton(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                           commit: bool, window_out: torch.Tensor | None = None):
    """Same contract as :func:`~specpilot.kernels.short_conv.reference.short_conv_silu_ref`; the
    window is only materialised when the rows stay pending (``commit`` False): committing returns
    None for it."""
    num_seqs, num_tokens, channels = x.shape
    kernel = weight.shape[1]
    if (conv_state.shape != (num_seqs, channels, kernel - 1) or weight.shape[0] != channels
            or x.stride(2) != 1 or conv_state.stride(2) != 1 or not weight.is_contiguous()):
        raise ValueError(f"short_conv_silu: conv_state {tuple(conv_state.shape)}, x "
                         f"{tuple(x.shape)} (strides {x.stride()}), weight {tuple(weight.shape)} "
                         "do not match")
    if commit and num_seqs > 1 and conv_state.stride(0) == 0:
        raise ValueError("short_conv_silu: cannot commit into an expanded conv state")
    out = torch.empty(num_seqs, num_tokens, channels, dtype=weight.dtype, device=x.device)
    window = None
    if not commit:
        window = window_out if window_out is not None else conv_state.new_empty(
            num_seqs, channels, kernel - 1 + num_tokens)
        if window.stride(2) != 1:
            raise ValueError("short_conv_silu: the window buffer's last dim must be contiguous")
    win = window if window is not None else out  # unused when committing
    grid = (num_seqs, cdiv(channels, BLOCK_C))
    short_conv_silu_kernel[grid](
        conv_state, x, weight, out, win, channels, num_tokens, conv_state.stride(0),
        conv_state.stride(1), x.stride(0), x.stride(1), win.stride(0), win.stride(1),
        K=kernel, KP=triton.next_power_of_2(kernel - 1), BLOCK_C=BLOCK_C, COMMIT=commit,
        KEEP=not commit, num_warps=NUM_WARPS)
    return out, window
