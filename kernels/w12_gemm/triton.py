"""Triton W12 skinny GEMM: ``out [M, N] = x [M, K] @ W^T`` with W decoded in registers.

The weight is never materialised in bf16: each K step loads three equally shaped uint8 tiles of
the blocked planes (:mod:`specpilot.kernels.w12.format`), the logical ``nib[:, j:j+BK]``,
``sm[:, j:j+BK]`` and ``sm[:, K2+j:K2+j+BK]``, decodes the low half and the high half (each with
its bits of the ``nib`` tile) with integer ops, and multiplies each with its own slice of x
(``x[:, j:j+BK]`` and ``x[:, K2+j:K2+j+BK]``).

Both decode without the exponent base and scale their fp32 sums by ``2^(base - C0)`` once
(:func:`specpilot.kernels.w12.triton.w12_decode_scaled`). Their weight loads have no mask (16-byte
vectors; ``cp.async`` when pipelined; ``tests/kernels/test_codegen.py`` checks the sm_90 code):
rows past N read row N - 1, whose outputs are never stored, and K steps run to K2 rounded up to a
whole step, inside the planes' zero-padded pair blocks (``BLOCK_K`` divides ``BP``). Only the x
loads are masked, so padding and another split's columns multiply zeros.

- ``w12_gemm_fwd_kernel_gemv`` (M <= 2): CUDA-core GEMV, decode to fp32 once for every row.
- ``w12_gemm_fwd_kernel_dot`` (any M): swap-AB; the decoded ``[BLOCK_N, BLOCK_K]`` bf16 tile is the
  A operand of ``tl.dot`` (weights on the MMA M side, tokens padded to BLOCK_T >= 16 on the N
  side). Because the decode is integer ops on the loaded bytes only, Triton converts the *bytes*
  into the A-operand register layout (shared memory -> registers) and decodes there: the
  fragment-native path, with no decoded bf16 tile written back to shared memory. With
  ``BLOCK_N == 16 * num_warps`` (1-2 warps) that is ``mma.sync`` at about 3 SASS instructions per
  weight in the K loop (5 before the sign moved into the nibble byte), counted on the sm_90 cubin
  by ``experiments/sass_per_weight.py``; ``wgmma`` (4+ warps, ``BLOCK_N >= 64``) takes its A
  operand in a layout whose byte shuffles cost about 6 (8 before).
- ``w12_gemm_fwd_kernel_dot_sk`` (M <= 64): the swap-AB step under a stream-K schedule (whole
  rounds of row tiles, then equal shares of the remaining K steps): no partial last wave.

The GEMV's K loop (``--kernel gemv``: 4 x 256, one warp, three stages) is about 5 instructions per
weight, one of them the FFMA (7.6 before).

Escapes, and what they do to summation order
--------------------------------------------
An escaped weight sits in the planes with its exponent clamped into the window, so the main loop
multiplies x by a wrong but finite value ``d``. The split that owns K range 0 then adds, per
escape of each of its rows, ``esc_delta * x[:, col]`` with ``esc_delta = fp32(exact) - fp32(d)``
precomputed at pack time (a per-row CSR walked in the epilogue, ~0.01% of weights: no extra
launch; with ``ESC_EARLY`` the GEMV fetches each row's first ``ESC_CHUNK`` escapes and their x
values under its first two K steps instead, so a program's tail waits on memory only for rows
with more escapes than that). Consequences, documented as the W12 GEMM contract:

- The *weights* are lossless: ``unpack(pack(w))`` is bit-identical to ``w``.
- The *output* is not bit-identical to a bf16 GEMM on ``w``: the escaped products enter the fp32
  sum as ``d*x`` in K order plus ``(e - d)*x`` at the end, and ``e - d`` itself rounds in fp32 when
  ``|e|`` is more than ~2^16 below the window (zeros, subnormals). The difference is at the level
  of fp32 summation-order noise, inside the one tolerance of :mod:`specpilot.kernels.common.check`.
- Split-K is deterministic (:mod:`specpilot.kernels.common.epilogue`): same inputs, same bits.
- Non-finite weights propagate (``inf - d = inf``, ``NaN - d = NaN``), as in the reference.
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from specpilot.kernels.common.epilogue import store_splitk
from specpilot.kernels.common.interpret import dot_acc
from specpilot.kernels.common.launch import num_sms
from specpilot.kernels.common.launch import plan_skinny
from specpilot.kernels.common.mma import mma_v2_compile
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start
from specpilot.kernels.common.prefetch import prefetch_l2
from specpilot.kernels.common.streamk import store_streamk
from specpilot.kernels.common.streamk import store_tile
from specpilot.kernels.common.streamk import streamk_range
from specpilot.kernels.common.test_keys import corrupt_if_asked
from specpilot.kernels.common.test_keys import hang_if_asked
from specpilot.kernels.skinny_gemm.triton import row_x
from specpilot.kernels.skinny_gemm.triton import rows_sum
from specpilot.kernels.w12.format import GEMM_FOR_ORDER
from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.triton import DECODE_ASM
from specpilot.kernels.w12.triton import plane_cols
from specpilot.kernels.w12.triton import plane_rows
from specpilot.kernels.w12.triton import w12_decode_f32
from specpilot.kernels.w12.triton import w12_decode_scaled
from specpilot.kernels.w12.triton import window_scale
from specpilot.kernels.w12_gemm import space


@triton.jit
def escape_rows(row_ptr, offs_n, mask):
    """``(start, count)`` of the escapes of rows ``offs_n`` (0 where ``mask`` is false). The GEMV
    with ``ESC_EARLY`` loads them at its start, so their latency hides under the K loop; the other
    kernels load them in their epilogue."""
    start = tl.load(row_ptr + offs_n, mask=mask, other=0)
    count = tl.load(row_ptr + offs_n + 1, mask=mask, other=0) - start
    return start, count


@triton.jit
def apply_escapes(acc, x_ptr, stride_xm, offs_m, M, start, count, first, esc_col_ptr,
                  esc_delta_ptr, ESC_CHUNK: tl.constexpr):
    """``acc [BM, BN] += esc_delta * x[offs_m, esc_col]`` over the escapes ``first, first + 1,
    ...`` of each row (``start``, ``count``: :func:`escape_rows`), ``ESC_CHUNK`` per row at a
    time: a chunk's loads are unrolled, so its ``esc_col`` and ``esc_delta`` loads, and then its x
    gathers, are in flight together (about two memory latencies per chunk instead of two per
    escape; a tuning parameter, see ``space.py``). No iteration when no row has more than
    ``first`` escapes."""
    m_mask = offs_m[:, None] < M
    for i0 in range(first, tl.max(count, axis=0), ESC_CHUNK):
        for d in tl.static_range(ESC_CHUNK):
            has = i0 + d < count
            col = tl.load(esc_col_ptr + start + i0 + d, mask=has, other=0)
            delta = tl.load(esc_delta_ptr + start + i0 + d, mask=has, other=0.0)
            # col is 0 where a row has no escape left: a valid address, times delta 0
            xv = tl.load(x_ptr + offs_m[:, None] * stride_xm + col[None, :], mask=m_mask,
                         other=0.0)
            acc += xv.to(tl.float32) * delta[None, :]
    return acc


@triton.jit
def weight_rows(planes_ptr, offs_n, N, K2, BR: tl.constexpr, BP: tl.constexpr):
    """``[BN, 1]`` pointers to rows ``offs_n`` in the blocked planes; rows past N read row N - 1
    (valid memory; their outputs are never stored), so weight loads need no mask."""
    rows = tl.minimum(offs_n, N - 1)
    return planes_ptr + plane_rows(rows, K2, BR, BP)[:, None]


@triton.jit
def blocks_to_l2(planes_ptr, first_row, N, K2, j_lo, j_hi, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr,
                 L2_PREFETCH: tl.constexpr):
    """Prefetch into L2 (:mod:`specpilot.kernels.common.prefetch`) the planes' whole blocks that
    hold the ``L2_PREFETCH`` K steps after the first, ``[j_lo + BLOCK_K, ...)`` below ``j_hi``, of
    the row blocks of rows ``first_row ...`` (past N: the last row block). A row block's pair
    blocks are one contiguous run, so that is one prefetch per row block."""
    b_lo = (j_lo + BLOCK_K) // BP
    b_hi = tl.cdiv(tl.minimum(j_lo + (1 + L2_PREFETCH) * BLOCK_K, j_hi), BP)
    nbytes = (b_hi - b_lo) * (3 * BR * BP)
    if nbytes > 0:
        for i in tl.static_range((BLOCK_N + BR - 1) // BR):
            block_row = tl.minimum(first_row // BR + i, (N - 1) // BR)
            prefetch_l2(planes_ptr + plane_rows(block_row * BR, K2, BR, BP)
                        + b_lo * (3 * BR * BP), nbytes)


@triton.jit
def step_tiles(w_rows, j0, BLOCK_K: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr):
    """One K step's three ``[BN, BLOCK_K]`` uint8 tiles: ``nib`` (signs and high code bits),
    low-half and high-half ``sm`` (low code bit and mantissa). Unmasked: rows are clamped
    (:func:`weight_rows`) and the planes' pair columns are zero-padded to whole blocks, which
    ``BLOCK_K`` divides."""
    tile = w_rows + plane_cols(j0, BR, BP) + tl.arange(0, BLOCK_K)[None, :]
    nib = tl.load(tile, eviction_policy="evict_first")
    sm_a = tl.load(tile + BR * BP, eviction_policy="evict_first")
    sm_b = tl.load(tile + 2 * BR * BP, eviction_policy="evict_first")
    return nib, sm_a, sm_b


@triton.jit
def x_masks(j0, j_hi, K, K2, BLOCK_K: tl.constexpr):
    """``(offs_j, a_mask, b_mask)``: the step's pair columns, and which of them are activations
    of this split (below ``j_hi``) and of the tensor (low half below K2, high half below K). The
    weights past them are padding or another split's: x is 0 there."""
    offs_j = j0 + tl.arange(0, BLOCK_K)
    inside = offs_j < j_hi
    return offs_j, inside & (offs_j < K2), inside & (K2 + offs_j < K)


@triton.jit
def split_range(pid_k, k_per_split, K2, BLOCK_K: tl.constexpr):
    """``(j_lo, j_hi)``: split ``pid_k``'s pair columns, up to K2 rounded up to a whole step (the
    planes are padded past it; x is masked there)."""
    j_lo = pid_k * k_per_split
    return j_lo, tl.minimum(j_lo + k_per_split, tl.cdiv(K2, BLOCK_K) * BLOCK_K)


@triton.jit
def gemv_step(acc, x_ptr, w_rows, j0, j_hi, K, K2, BLOCK_K: tl.constexpr, BR: tl.constexpr,
              BP: tl.constexpr, ASM: tl.constexpr):
    """One K step of the GEMV: ``acc [BN, BK] += w[:, j0:j0+BK] * x`` for both halves."""
    nib, sm_a, sm_b = step_tiles(w_rows, j0, BLOCK_K, BR, BP)
    return gemv_mac(acc, nib, sm_a, sm_b, x_ptr, j0, j_hi, K, K2, BLOCK_K, ASM)


@triton.jit
def gemv_mac(acc, nib, sm_a, sm_b, x_ptr, j0, j_hi, K, K2, BLOCK_K: tl.constexpr,
             ASM: tl.constexpr):
    """The GEMV step at pair column ``j0`` on its loaded tiles (:func:`step_tiles`): loads x and
    accumulates both halves."""
    offs_j, a_mask, b_mask = x_masks(j0, j_hi, K, K2, BLOCK_K)
    x_a = tl.load(x_ptr + offs_j, mask=a_mask, other=0.0, eviction_policy="evict_last")
    x_b = tl.load(x_ptr + K2 + offs_j, mask=b_mask, other=0.0, eviction_policy="evict_last")
    acc += w12_decode_f32(sm_a, nib, False, ASM) * x_a.to(tl.float32)[None, :]
    acc += w12_decode_f32(sm_b, nib, True, ASM) * x_b.to(tl.float32)[None, :]
    return acc


@triton.jit
def gemv_rows_mac(acc0, acc1, nib, sm_a, sm_b, x_ptr, stride_xm, M, j0, j_hi, K, K2,
                  BLOCK_K: tl.constexpr, ASM: tl.constexpr):
    """The GEMV for 2 rows at pair column ``j0`` on its loaded tiles: both halves decoded once,
    then ``acc_i [BN, BK]`` += them times row i's x (0 past M), one accumulator per row in the
    M = 1 GEMV's layout."""
    offs_j, a_mask, b_mask = x_masks(j0, j_hi, K, K2, BLOCK_K)
    w_a = w12_decode_f32(sm_a, nib, False, ASM)
    w_b = w12_decode_f32(sm_b, nib, True, ASM)
    acc0 += w_a * row_x(x_ptr, stride_xm, 0, M, offs_j, a_mask)
    acc0 += w_b * row_x(x_ptr + K2, stride_xm, 0, M, offs_j, b_mask)
    acc1 += w_a * row_x(x_ptr, stride_xm, 1, M, offs_j, a_mask)
    acc1 += w_b * row_x(x_ptr + K2, stride_xm, 1, M, offs_j, b_mask)
    return acc0, acc1


@triton.jit(do_not_specialize=["M"])
def w12_gemm_fwd_kernel_gemv(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
                             ws_ptr, lock_ptr, M, N, K, K2, stride_xm, scale, k_per_split,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             SPLIT_K: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr,
                             ASM: tl.constexpr, ESC_CHUNK: tl.constexpr, K_STAGES: tl.constexpr,
                             ESC_EARLY: tl.constexpr, L2_PREFETCH: tl.constexpr,
                             PDL: tl.constexpr):
    """M <= BLOCK_M (1, the decode GEMV, or 2): grid (N / BLOCK_N, SPLIT_K); ``x [M, K]``,
    W12 ``[N, K]`` -> ``out [M, N]``; each weight is decoded once and multiplied by every row's x
    (:func:`gemv_rows_mac`: a ``[BLOCK_N, BLOCK_K]`` partial product tile per row). Split
    s covers pair columns ``[s*k_per_split, ...)`` up to K2 rounded up to a whole step; only split
    0 applies escapes.

    ``ESC_EARLY`` (the launcher sets it only at M == 1 and where every split has two steps or
    more): the escapes do not wait at the end. The rows' escape ranges load at the start, the first
    ``ESC_CHUNK`` escapes of each row (``esc_col``, ``esc_delta``) after the first K step and their
    x values after the second, each under the next step's weight loads; only rows with more
    escapes go on in the epilogue (:func:`apply_escapes`). Otherwise the epilogue loads and walks
    them all.

    ``K_STAGES > 1`` software-pipelines the K loop (``cp.async`` into shared memory): that many
    K steps' tiles in flight per warp without holding them in registers (a GEMV loop with no
    ``tl.dot`` is pipelined only when asked).

    The first K step's weight tiles (and, with ``ESC_EARLY``, the escape ranges) are loaded
    *before* :func:`pdl_start`, under the previous kernel's tail (why that is safe:
    :mod:`specpilot.kernels.common.pdl`), and with ``L2_PREFETCH`` the next steps' blocks are
    requested into L2 there (:func:`blocks_to_l2`); x is read after the wait."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    w_rows = weight_rows(planes_ptr, offs_n, N, K2, BR, BP)
    j_lo, j_hi = split_range(pid_k, k_per_split, K2, BLOCK_K)  # never empty (splitk_plan)
    nib, sm_a, sm_b = step_tiles(w_rows, j_lo, BLOCK_K, BR, BP)
    if L2_PREFETCH:
        blocks_to_l2(planes_ptr, pid_n * BLOCK_N, N, K2, j_lo, j_hi, BLOCK_N, BLOCK_K, BR, BP,
                     L2_PREFETCH)
    if ESC_EARLY:
        start, count = escape_rows(row_ptr, offs_n, n_mask & (pid_k == 0))
    pdl_start(PDL)
    if BLOCK_M > 1:
        acc0 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        acc0, acc1 = gemv_rows_mac(acc0, acc0, nib, sm_a, sm_b, x_ptr, stride_xm, M, j_lo, j_hi,
                                   K, K2, BLOCK_K, ASM)
        for j0 in tl.range(j_lo + BLOCK_K, j_hi, BLOCK_K, num_stages=K_STAGES):
            nib, sm_a, sm_b = step_tiles(w_rows, j0, BLOCK_K, BR, BP)
            acc0, acc1 = gemv_rows_mac(acc0, acc1, nib, sm_a, sm_b, x_ptr, stride_xm, M, j0,
                                       j_hi, K, K2, BLOCK_K, ASM)
        offs_m = tl.arange(0, BLOCK_M)
        y_rows = rows_sum(acc0, acc1) * scale  # [2, BLOCK_N]
        start, count = escape_rows(row_ptr, offs_n, n_mask & (pid_k == 0))
        y_rows = apply_escapes(y_rows, x_ptr, stride_xm, offs_m, M, start, count, 0, esc_col_ptr,
                               esc_delta_ptr, ESC_CHUNK)
        store_splitk(y_rows, out_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, pid_n, pid_k,
                     SPLIT_K)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        acc = gemv_mac(acc, nib, sm_a, sm_b, x_ptr, j_lo, j_hi, K, K2, BLOCK_K, ASM)
        j_rest = j_lo + BLOCK_K
        if ESC_EARLY:
            slot = tl.arange(0, ESC_CHUNK)[None, :]
            has = slot < count[:, None]  # [BLOCK_N, ESC_CHUNK]
            col = tl.load(esc_col_ptr + start[:, None] + slot, mask=has, other=0)
            delta = tl.load(esc_delta_ptr + start[:, None] + slot, mask=has, other=0.0)
            acc = gemv_step(acc, x_ptr, w_rows, j_rest, j_hi, K, K2, BLOCK_K, BR, BP, ASM)
            x_esc = tl.load(x_ptr + col, mask=has, other=0.0)
            j_rest += BLOCK_K
        for j0 in tl.range(j_rest, j_hi, BLOCK_K, num_stages=K_STAGES):
            acc = gemv_step(acc, x_ptr, w_rows, j0, j_hi, K, K2, BLOCK_K, BR, BP, ASM)
        y = tl.sum(acc, axis=1) * scale  # [BLOCK_N]
        if ESC_EARLY:
            y += tl.sum(x_esc.to(tl.float32) * delta, axis=1)
            first = ESC_CHUNK  # the rest of rows with more than a chunk
        else:
            start, count = escape_rows(row_ptr, offs_n, n_mask & (pid_k == 0))
            first = 0
        y = apply_escapes(y[None, :], x_ptr, 0, tl.arange(0, 1), M, start, count, first,
                          esc_col_ptr, esc_delta_ptr, ESC_CHUNK)
        store_splitk(y, out_ptr, ws_ptr, lock_ptr, tl.arange(0, 1), offs_n, M, N, pid_n, pid_k,
                     SPLIT_K)


@triton.jit
def gemv_segment(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, M, N, K, K2, scale,
                 tile, s_lo, s_hi, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 BR: tl.constexpr, BP: tl.constexpr, ASM: tl.constexpr,
                 ESC_CHUNK: tl.constexpr):
    """``(offs_n, y [1, BLOCK_N])``: K steps ``[s_lo, s_hi)`` of ``tile``'s GEMV, scaled, with the
    tile's escapes added when the segment starts at K step 0."""
    offs_n = (tile * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    n_mask = offs_n < N
    w_rows = weight_rows(planes_ptr, offs_n, N, K2, BR, BP)
    j_hi = K2  # no split: every column below K2 is this segment's (x is masked past it)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for s in range(s_lo, s_hi):
        acc = gemv_step(acc, x_ptr, w_rows, s * BLOCK_K, j_hi, K, K2, BLOCK_K, BR, BP, ASM)
    y = tl.sum(acc, axis=1)[None, :] * scale  # [1, BLOCK_N]
    if s_lo == 0:
        start, count = escape_rows(row_ptr, offs_n, n_mask)
        y = apply_escapes(y, x_ptr, 0, tl.arange(0, 1), M, start, count, 0, esc_col_ptr,
                          esc_delta_ptr, ESC_CHUNK)
    return offs_n, y


@triton.jit(do_not_specialize=["M"])
def w12_gemm_fwd_kernel_gemv_sk(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
                                ws_ptr, lock_ptr, M, N, K, K2, scale, steps, dp_tiles, units, per,
                                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BR: tl.constexpr,
                                BP: tl.constexpr, ASM: tl.constexpr, ESC_CHUNK: tl.constexpr,
                                PDL: tl.constexpr):
    """M == 1, data-parallel rounds then stream-K (:mod:`specpilot.kernels.common.streamk`):
    grid (P,); program p takes whole tiles p, p + P, ... below ``dp_tiles``, then K-step units
    ``[p*per, (p+1)*per)`` of the ``units`` of the remaining tiles. ``PDL``: launched as a
    programmatic dependent launch; nothing is read or written before ``griddepcontrol.wait``
    returns, so the launch overlaps only the previous kernel's teardown."""
    p = tl.program_id(0)
    if PDL:
        gdc_wait()
    for tile in range(p, dp_tiles, tl.num_programs(0)):
        offs_n, y = gemv_segment(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, M, N, K,
                                 K2, scale, tile, 0, steps, BLOCK_N, BLOCK_K, BR, BP, ASM,
                                 ESC_CHUNK)
        store_tile(y, out_ptr, tl.arange(0, 1), offs_n, 1, N)
    u_lo, u_hi, tile, s_lo = streamk_range(p, per, units, steps)  # tile: from dp_tiles on
    u = u_lo
    while u < u_hi:
        s_hi = tl.minimum(steps, s_lo + (u_hi - u))
        offs_n, y = gemv_segment(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, M, N, K,
                                 K2, scale, dp_tiles + tile, s_lo, s_hi, BLOCK_N, BLOCK_K, BR,
                                 BP, ASM, ESC_CHUNK)
        store_streamk(y, out_ptr, ws_ptr, lock_ptr, tl.arange(0, 1), offs_n, 1, N, tile, s_lo,
                      s_hi, u == u_lo, p, per, steps, 1, BLOCK_N)
        u += s_hi - s_lo
        tile += 1
        s_lo = 0


@triton.jit
def dot_w(w, x_t, acc, X_F32: tl.constexpr):
    """``acc + w @ x_t``: bf16 MMA for bf16 x; for float32 x (the float32 validation twin) the
    decoded weights widened exactly and an IEEE float32 dot."""
    if X_F32:
        w = w.to(tl.float32)
    return dot_acc(w, x_t, acc, X_F32)


@triton.jit
def dot_step(acc, x_cols, w_rows, j0, j_hi, K, K2, t_mask, BLOCK_K: tl.constexpr,
             BR: tl.constexpr, BP: tl.constexpr, ASM: tl.constexpr, X_F32: tl.constexpr):
    """One K step of the swap-AB kernel: both halves' decoded tiles times their x^T slices."""
    nib, sm_a, sm_b = step_tiles(w_rows, j0, BLOCK_K, BR, BP)
    return dot_mac(acc, nib, sm_a, sm_b, x_cols, j0, j_hi, K, K2, t_mask, BLOCK_K, ASM, X_F32)


@triton.jit
def dot_mac(acc, nib, sm_a, sm_b, x_cols, j0, j_hi, K, K2, t_mask, BLOCK_K: tl.constexpr,
            ASM: tl.constexpr, X_F32: tl.constexpr):
    """The swap-AB step at pair column ``j0`` on its loaded tiles (:func:`step_tiles`)."""
    offs_j, a_mask, b_mask = x_masks(j0, j_hi, K, K2, BLOCK_K)
    xa_t = tl.load(x_cols + offs_j[:, None], mask=a_mask[:, None] & t_mask[None, :], other=0.0,
                   eviction_policy="evict_last")  # [BLOCK_K, BLOCK_T]
    xb_t = tl.load(x_cols + K2 + offs_j[:, None], mask=b_mask[:, None] & t_mask[None, :],
                   other=0.0, eviction_policy="evict_last")
    acc = dot_w(w12_decode_scaled(sm_a, nib, False, ASM), xa_t, acc, X_F32)
    acc = dot_w(w12_decode_scaled(sm_b, nib, True, ASM), xb_t, acc, X_F32)
    return acc


@triton.jit(do_not_specialize=["M"])
def w12_gemm_fwd_kernel_dot(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
                            ws_ptr, lock_ptr, M, N, K, K2, stride_xm, scale, k_per_split,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
                            SPLIT_K: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr,
                            ASM: tl.constexpr, X_F32: tl.constexpr, ESC_CHUNK: tl.constexpr,
                            PREFETCH: tl.constexpr, L2_PREFETCH: tl.constexpr,
                            PDL: tl.constexpr, MMA_V2: tl.constexpr):
    """Grid (M / BLOCK_T, N / BLOCK_N, SPLIT_K); ``x [M, K]``, W12 ``[N, K]`` -> ``[M, N]``.

    The token tiles of one weight tile are neighbours in launch order, so where M spans several
    (``BLOCK_T`` below M) they run together and the later ones can find the weights in L2; each
    decodes them itself, in registers sized for its own BLOCK_T tokens.

    With ``num_warps * 16 == BLOCK_N`` (1 or 2 warps) Triton emits ``mma.sync`` with the decoded
    tile as the A operand in registers; with 4+ warps and ``BLOCK_N >= 64`` it emits ``wgmma``,
    unless ``MMA_V2`` (:mod:`specpilot.kernels.common.mma`) asks for ``mma.sync`` there too.
    ``PREFETCH``: the first K step's weight tiles load before :func:`pdl_start`, as in the GEMV
    (same products in the same order: the result is bit-identical either way); ``L2_PREFETCH``:
    the next steps' blocks are requested into L2 there (by the first token tile's programs).
    """
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    n_mask = offs_n < N
    t_mask = offs_t < M
    w_rows = weight_rows(planes_ptr, offs_n, N, K2, BR, BP)
    x_cols = x_ptr + offs_t[None, :] * stride_xm
    j_lo, j_hi = split_range(pid_k, k_per_split, K2, BLOCK_K)  # never empty (splitk_plan)
    if PREFETCH:
        nib, sm_a, sm_b = step_tiles(w_rows, j_lo, BLOCK_K, BR, BP)
    if L2_PREFETCH:
        if pid_t == 0:
            blocks_to_l2(planes_ptr, pid_n * BLOCK_N, N, K2, j_lo, j_hi, BLOCK_N, BLOCK_K, BR,
                         BP, L2_PREFETCH)
    pdl_start(PDL)
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    j_rest = j_lo
    if PREFETCH:
        acc = dot_mac(acc, nib, sm_a, sm_b, x_cols, j_lo, j_hi, K, K2, t_mask, BLOCK_K, ASM,
                      X_F32)
        j_rest += BLOCK_K
    for j0 in range(j_rest, j_hi, BLOCK_K):
        acc = dot_step(acc, x_cols, w_rows, j0, j_hi, K, K2, t_mask, BLOCK_K, BR, BP, ASM, X_F32)
    out_t = tl.trans(acc) * scale  # [BLOCK_T, BLOCK_N]
    start, count = escape_rows(row_ptr, offs_n, n_mask & (pid_k == 0))
    out_t = apply_escapes(out_t, x_ptr, stride_xm, offs_t, M, start, count, 0, esc_col_ptr,
                          esc_delta_ptr, ESC_CHUNK)  # count is 0 outside split 0
    tile_id = pid_n * tl.num_programs(0) + pid_t
    store_splitk(out_t, out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile_id, pid_k, SPLIT_K)


@triton.jit
def dot_segment(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, M, N, K, K2, stride_xm,
                scale, tile, s_lo, s_hi, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                BLOCK_T: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr, ASM: tl.constexpr,
                X_F32: tl.constexpr, ESC_CHUNK: tl.constexpr):
    """``(offs_t, offs_n, out_t [BLOCK_T, BLOCK_N])``: K steps ``[s_lo, s_hi)`` of row tile
    ``tile`` of the swap-AB product for all M <= BLOCK_T tokens, scaled, with the tile's escapes
    added when the segment starts at K step 0."""
    offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = tl.arange(0, BLOCK_T)
    n_mask = offs_n < N
    t_mask = offs_t < M
    w_rows = weight_rows(planes_ptr, offs_n, N, K2, BR, BP)
    x_cols = x_ptr + offs_t[None, :] * stride_xm
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    for s in range(s_lo, s_hi):  # j_hi = K2: no split, x is masked past it
        acc = dot_step(acc, x_cols, w_rows, s * BLOCK_K, K2, K, K2, t_mask, BLOCK_K, BR, BP, ASM,
                       X_F32)
    out_t = tl.trans(acc) * scale  # [BLOCK_T, BLOCK_N]
    if s_lo == 0:
        start, count = escape_rows(row_ptr, offs_n, n_mask)
        out_t = apply_escapes(out_t, x_ptr, stride_xm, offs_t, M, start, count, 0, esc_col_ptr,
                              esc_delta_ptr, ESC_CHUNK)
    return offs_t, offs_n, out_t


@triton.jit(do_not_specialize=["M"])
def w12_gemm_fwd_kernel_dot_sk(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
                               ws_ptr, lock_ptr, M, N, K, K2, stride_xm, scale, steps, dp_tiles,
                               units, per, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               BLOCK_T: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr,
                               ASM: tl.constexpr, X_F32: tl.constexpr, ESC_CHUNK: tl.constexpr,
                               PDL: tl.constexpr):
    """M <= BLOCK_T, the swap-AB kernel under the GEMVs' schedule of data-parallel rounds then
    stream-K (:mod:`specpilot.kernels.common.streamk`): grid (P,); program p takes whole row
    tiles p, p + P, ... below ``dp_tiles``, then K-step units ``[p*per, (p+1)*per)`` of the
    ``units`` of the remaining tiles, so every program streams about as many K steps and none
    runs a partial last wave alone. ``PDL``: a programmatic dependent launch, waiting before any
    read or write."""
    p = tl.program_id(0)
    if PDL:
        gdc_wait()
    for tile in range(p, dp_tiles, tl.num_programs(0)):
        offs_t, offs_n, out_t = dot_segment(x_ptr, planes_ptr, row_ptr, esc_col_ptr,
                                            esc_delta_ptr, M, N, K, K2, stride_xm, scale, tile,
                                            0, steps, BLOCK_N, BLOCK_K, BLOCK_T, BR, BP, ASM,
                                            X_F32, ESC_CHUNK)
        store_tile(out_t, out_ptr, offs_t, offs_n, M, N)
    u_lo, u_hi, tile, s_lo = streamk_range(p, per, units, steps)  # tile: from dp_tiles on
    u = u_lo
    while u < u_hi:
        s_hi = tl.minimum(steps, s_lo + (u_hi - u))
        offs_t, offs_n, out_t = dot_segment(x_ptr, planes_ptr, row_ptr, esc_col_ptr,
                                            esc_delta_ptr, M, N, K, K2, stride_xm, scale,
                                            dp_tiles + tile, s_lo, s_hi, BLOCK_N, BLOCK_K,
                                            BLOCK_T, BR, BP, ASM, X_F32, ESC_CHUNK)
        store_streamk(out_t, out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile, s_lo, s_hi,
                      u == u_lo, p, per, steps, BLOCK_T, BLOCK_N)
        u += s_hi - s_lo
        tile += 1
        s_lo = 0


def esc_early(cfg: dict, plan, k2: int) -> bool:
    """The GEMV's ``ESC_EARLY``: as configured, where every split has the two K steps it peels."""
    step = cfg["BLOCK_K"]
    last = -(-k2 // step) * step - (plan.splits - 1) * plan.k_per_split
    return bool(cfg["ESC_EARLY"]) and min(plan.k_per_split, last) >= 2 * step


def w12_call(op: str, x: torch.Tensor, packed: W12Tensor, order: str,
             out_dtype: torch.dtype | None) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """What every W12 GEMM launcher checks and allocates first: ``(x with unit column stride,
    out [M, N], done)``; ``done`` when the result needs no kernel (an empty M, N or K: ``out``
    is then the answer). ``order``: the plane order the launcher ``op`` reads."""
    if len(packed.shape) != 2 or x.dim() != 2 or x.shape[1] != packed.shape[1]:
        raise ValueError(f"expected x [M, K] and a 2-D W12 weight [N, K], got "
                         f"{tuple(x.shape)} and {tuple(packed.shape)}")
    if packed.order != order:
        raise ValueError(f"{op} reads {order}-order planes, this weight is in {packed.order!r} "
                         f"order: pack it with order={order!r}, or use "
                         f"{GEMM_FOR_ORDER[packed.order]}")
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"{op} takes bf16 (or float32) x, got {x.dtype}")
    if x.device != packed.device:
        raise ValueError(f"x is on {x.device} but the W12 weight is on {packed.device}")
    if x.stride(1) != 1:
        x = x.contiguous()
    (m, k), n = x.shape, packed.shape[0]
    out = torch.empty((m, n), dtype=out_dtype or x.dtype, device=x.device)
    if m == 0 or n == 0:
        return x, out, True
    if k == 0:
        return x, out.zero_(), True
    return x, out, False


def w12_gemm(x: torch.Tensor, packed: W12Tensor, out_dtype: torch.dtype | None = None,
             config: dict | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 times the W12 weight ``[N, K]`` transposed -> ``[M, N]``, fp32
    accumulation.

    Same contract as :func:`specpilot.kernels.w12_gemm.reference.w12_gemm_ref` (up to the summation
    order described in the module docstring). ``config``: an entry of ``space.py``; None picks the
    tuned or default config.

    float32 ``x`` (token forcing on a float32 validation twin, whose weights hold bf16 values) runs
    the same decode and escape code with float32 products: the GEMV as it is, the swap-AB kernel
    with an IEEE float32 dot, on the space's default config with 64-pair K steps and 2 stages
    (tuned entries are bf16 timings, and float32 x tiles take twice the shared memory).
    """
    x, out, done = w12_call("w12_gemm", x, packed, "rows", out_dtype)
    if done:
        return out
    m, k = x.shape
    n, k2 = packed.shape[0], packed.k_half
    x_f32 = x.dtype == torch.float32
    if x_f32 and config is None:  # float32 x doubles the x tiles: half the stages, half the K step
        config = space.default_config(m, n, k, num_sms(x.device))
        if config["kernel"] == "dot":
            config = {**config, "BLOCK_K": min(64, config["BLOCK_K"]), "num_stages": 2}
    plan = plan_skinny("w12_gemm", config, m, n, k, k2, x.device, space)
    cfg = plan.cfg
    hang_if_asked(x, cfg)
    if packed.block_pairs % cfg["BLOCK_K"]:
        raise ValueError(f"BLOCK_K={cfg['BLOCK_K']} pairs must divide the W12 planes' "
                         f"{packed.block_pairs}-pair blocks")
    planes = (packed.planes, packed.row_ptr, packed.esc_col, packed.esc_delta)
    meta = {"BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"], "BR": packed.block_rows,
            "BP": packed.block_pairs, "ASM": DECODE_ASM[cfg["DECODE"]],
            "ESC_CHUNK": cfg["ESC_CHUNK"], "num_warps": cfg["num_warps"],
            "num_stages": cfg["num_stages"]}
    # the prefetch's runs must start 16-byte aligned (prefetch.py); block runs are 192-byte
    # multiples, so the planes' start decides
    l2 = cfg.get("L2_PREFETCH", 0) if packed.planes.data_ptr() % 16 == 0 else 0
    scale = window_scale(packed.base)
    if cfg["kernel"] == "gemv_sk":
        w12_gemm_fwd_kernel_gemv_sk[(plan.programs,)](
            x, *planes, out, plan.workspace, plan.locks, m, n, k, k2, scale, *plan.schedule,
            **plan.options, **meta)
    elif cfg["kernel"] == "dot_sk":
        w12_gemm_fwd_kernel_dot_sk[(plan.programs,)](
            x, *planes, out, plan.workspace, plan.locks, m, n, k, k2, x.stride(0), scale,
            *plan.schedule, BLOCK_T=plan.rows, X_F32=x_f32, **plan.options, **meta)
    elif plan.block_t is None:
        meta["SPLIT_K"] = plan.splits
        w12_gemm_fwd_kernel_gemv[(plan.grid_n, plan.splits)](
            x, *planes, out, plan.workspace, plan.locks, m, n, k, k2, x.stride(0), scale,
            plan.k_per_split, BLOCK_M=space.gemv_rows(m), K_STAGES=cfg["K_STAGES"],
            ESC_EARLY=m == 1 and esc_early(cfg, plan, k2), L2_PREFETCH=l2, **meta,
            **pdl_launch(x.device))
    else:
        with mma_v2_compile(cfg["MMA_V2"]):
            w12_gemm_fwd_kernel_dot[(plan.grid_t, plan.grid_n, plan.splits)](
                x, *planes, out, plan.workspace, plan.locks, m, n, k, k2, x.stride(0), scale,
                plan.k_per_split, BLOCK_T=plan.block_t, X_F32=x_f32, SPLIT_K=plan.splits,
                PREFETCH=bool(cfg["PREFETCH"]), L2_PREFETCH=l2, MMA_V2=bool(cfg["MMA_V2"]),
                **meta, **pdl_launch(x.device))
    return corrupt_if_asked(out, cfg)
