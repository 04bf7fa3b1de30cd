"""Triton skinny bf16 GEMM for decode (M = 1) and verify (M = 2..64): ``out = x @ weight^T``.

Kernel families, each streaming the weight once with an fp32 accumulator (evict-first loads where
the loads are per thread); each has a stream-K variant, ``..._gemv_sk``,
``..._dot_sk`` and ``..._tma_sk`` (the last two M <= 64, one token tile):

- ``skinny_gemm_fwd_kernel_gemv`` (M <= 2): CUDA-core GEMV; a ``[BLOCK_N, BLOCK_K]`` fp32 partial
  product tile per row is reduced over K once at the end.
- ``skinny_gemm_fwd_kernel_dot`` (any M): swap-AB ``tl.dot``; the weight tile
  ``[BLOCK_N, BLOCK_K]`` is the MMA's M side and the tokens, padded to ``BLOCK_T`` (>= 16), its
  N side, so M = 1..16 wastes no weight bandwidth.
- ``skinny_gemm_fwd_kernel_tma`` (any M, K a multiple of 8): the same swap-AB tiles, each K step's
  weight and x tiles copied by the Tensor Memory Accelerator (host-built tensor descriptors; on
  sm_90 one ``cp.async.bulk.tensor`` per tile instead of a 16-byte ``cp.async`` per thread and
  vector, and no masks: rows and columns past the tensor arrive as zeros).

All split K deterministically (:mod:`specpilot.kernels.common.epilogue`).
"""

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait
from triton.tools.tensor_descriptor import TensorDescriptor

from specpilot.kernels.common.epilogue import store_splitk
from specpilot.kernels.common.interpret import dot_bf16
from specpilot.kernels.common.launch import plan_skinny
from specpilot.kernels.common.mma import mma_v2_compile
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start
from specpilot.kernels.common.prefetch import prefetch_l2
from specpilot.kernels.common.streamk import store_streamk
from specpilot.kernels.common.streamk import store_tile
from specpilot.kernels.common.streamk import streamk_finish
from specpilot.kernels.common.streamk import streamk_range
from specpilot.kernels.common.streamk import streamk_write
from specpilot.kernels.common.test_keys import corrupt_if_asked
from specpilot.kernels.common.test_keys import hang_if_asked
from specpilot.kernels.skinny_gemm import space


@triton.jit
def weight_tile(w_rows, n_mask, k0, k_hi, BLOCK_K: tl.constexpr):
    """The ``[BLOCK_N, BLOCK_K]`` weight tile of the K step at ``k0`` (0 past N and ``k_hi``)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    return tl.load(w_rows + offs_k[None, :], mask=n_mask[:, None] & (offs_k < k_hi)[None, :],
                   other=0.0, eviction_policy="evict_first")


@triton.jit
def rows_to_l2(w_ptr, stride_wn, first_row, N, k_lo, k_hi, BLOCK_K: tl.constexpr,
               BLOCK_N: tl.constexpr, L2_PREFETCH: tl.constexpr):
    """Prefetch into L2 (:mod:`specpilot.kernels.common.prefetch`) the weights of the
    ``L2_PREFETCH`` K steps after the first, ``[k_lo + BLOCK_K, ...)`` below ``k_hi``, of rows
    ``first_row ...`` (rows past N: row N - 1). Each row's run is cut to whole 16 bytes; the
    launcher asks for it only where rows start 16-byte aligned."""
    k_from = k_lo + BLOCK_K
    nbytes = (tl.minimum(k_lo + (1 + L2_PREFETCH) * BLOCK_K, k_hi) - k_from) * 2 // 16 * 16
    if nbytes > 0:
        for i in tl.static_range(BLOCK_N):
            row = tl.minimum(first_row + i, N - 1).to(tl.int64)
            prefetch_l2(w_ptr + row * stride_wn + k_from, nbytes)


@triton.jit
def gemv_mac(acc, w, x_ptr, k0, k_hi, BLOCK_K: tl.constexpr):
    """``acc + w * x[k0:k0+BLOCK_K]`` in fp32 (x is 0 past ``k_hi``)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    xv = tl.load(x_ptr + offs_k, mask=offs_k < k_hi, other=0.0, eviction_policy="evict_last")
    return acc + w.to(tl.float32) * xv.to(tl.float32)[None, :]


@triton.jit
def row_x(x_ptr, stride_xm, row, M, offs_k, k_mask):
    """fp32 ``x[row, offs_k]``, 0 where ``k_mask`` is false or ``row`` is past M."""
    xv = tl.load(x_ptr + row * stride_xm + offs_k, mask=k_mask & (row < M), other=0.0,
                 eviction_policy="evict_last")
    return xv.to(tl.float32)[None, :]


@triton.jit
def gemv_rows_mac(acc0, acc1, w, x_ptr, stride_xm, M, k0, k_hi, BLOCK_K: tl.constexpr):
    """The GEMV for 2 rows: ``acc_i [BN, BK] + w * x[i, k0:k0+BLOCK_K]`` in fp32, the weight tile
    loaded once for both (x is 0 past ``k_hi`` and past M). One accumulator per row, each in the
    M = 1 GEMV's layout (a ``[2, BN, BK]`` tile converted layouts through shared memory and lost
    on the H200)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    k_mask = offs_k < k_hi
    wf = w.to(tl.float32)
    acc0 += wf * row_x(x_ptr, stride_xm, 0, M, offs_k, k_mask)
    acc1 += wf * row_x(x_ptr, stride_xm, 1, M, offs_k, k_mask)
    return acc0, acc1


@triton.jit
def rows_sum(acc0, acc1):
    """``[2, BN]``: row i is ``acc_i`` summed over K."""
    rows = tl.arange(0, 2)[:, None]
    return tl.where(rows == 0, tl.sum(acc0, axis=1)[None, :], tl.sum(acc1, axis=1)[None, :])


@triton.jit
def dot_mac(acc, w, x_cols, t_mask, k0, k_hi, BLOCK_K: tl.constexpr):
    """``acc + w @ x[:, k0:k0+BLOCK_K]^T`` on the tensor cores (x is 0 past ``k_hi``)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    xt = tl.load(x_cols + offs_k[:, None], mask=(offs_k < k_hi)[:, None] & t_mask[None, :],
                 other=0.0, eviction_policy="evict_last")  # [BLOCK_K, BLOCK_T]
    return dot_bf16(w, xt, acc)


@triton.jit(do_not_specialize=["M"])
def skinny_gemm_fwd_kernel_gemv(x_ptr, w_ptr, out_ptr, ws_ptr, lock_ptr, M, N, K, stride_xm,
                                stride_wn, k_per_split, BLOCK_M: tl.constexpr,
                                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                SPLIT_K: tl.constexpr, K_STAGES: tl.constexpr,
                                L2_PREFETCH: tl.constexpr, PDL: tl.constexpr):
    """M <= BLOCK_M (1, the decode GEMV, or 2): grid (N / BLOCK_N, SPLIT_K); ``x [M, K]``,
    ``w [N, K]`` -> ``out [M, N]``, every weight loaded once and multiplied by each row's x on the
    CUDA cores (:func:`gemv_rows_mac`: a ``[BLOCK_N, BLOCK_K]`` partial product tile per row).
    ``K_STAGES > 1`` software-pipelines the K loop (``cp.async``). The first K step's weight tile
    is loaded before :func:`pdl_start`, under the previous kernel's tail
    (:mod:`specpilot.kernels.common.pdl`), and with ``L2_PREFETCH`` the next steps' weights are
    requested into L2 (:func:`rows_to_l2`); x is read after the wait."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    k_lo = pid_k * k_per_split  # every split is non-empty (splitk_plan)
    k_hi = tl.minimum(k_lo + k_per_split, K)
    w_first = weight_tile(w_rows, n_mask, k_lo, k_hi, BLOCK_K)
    if L2_PREFETCH:
        rows_to_l2(w_ptr, stride_wn, pid_n * BLOCK_N, N, k_lo, k_hi, BLOCK_K, BLOCK_N,
                   L2_PREFETCH)
    pdl_start(PDL)
    offs_m = tl.arange(0, BLOCK_M)
    if BLOCK_M == 1:
        acc = gemv_mac(tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32), w_first, x_ptr, k_lo,
                       k_hi, BLOCK_K)
        for k0 in tl.range(k_lo + BLOCK_K, k_hi, BLOCK_K, num_stages=K_STAGES):
            acc = gemv_mac(acc, weight_tile(w_rows, n_mask, k0, k_hi, BLOCK_K), x_ptr, k0, k_hi,
                           BLOCK_K)
        y = tl.sum(acc, axis=1)[None, :]  # [1, BLOCK_N]
    else:
        acc0 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        acc0, acc1 = gemv_rows_mac(acc0, acc0, w_first, x_ptr, stride_xm, M, k_lo, k_hi, BLOCK_K)
        for k0 in tl.range(k_lo + BLOCK_K, k_hi, BLOCK_K, num_stages=K_STAGES):
            acc0, acc1 = gemv_rows_mac(acc0, acc1, weight_tile(w_rows, n_mask, k0, k_hi, BLOCK_K),
                                       x_ptr, stride_xm, M, k0, k_hi, BLOCK_K)
        y = rows_sum(acc0, acc1)  # [2, BLOCK_N]
    store_splitk(y, out_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, pid_n, pid_k, SPLIT_K)


@triton.jit
def gemv_segment(x_ptr, w_ptr, N, K, stride_wn, tile, s_lo, s_hi, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    """``(offs_n, y [1, BLOCK_N])``: K steps ``[s_lo, s_hi)`` of ``tile``'s GEMV."""
    offs_n = (tile * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    n_mask = offs_n < N
    w_rows = w_ptr + offs_n[:, None] * stride_wn
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for s in range(s_lo, s_hi):
        offs_k = s * BLOCK_K + tl.arange(0, BLOCK_K)
        k_mask = offs_k < K
        w = tl.load(w_rows + offs_k[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0,
                    eviction_policy="evict_first")
        xv = tl.load(x_ptr + offs_k, mask=k_mask, other=0.0, eviction_policy="evict_last")
        acc += w.to(tl.float32) * xv.to(tl.float32)[None, :]
    return offs_n, tl.sum(acc, axis=1)[None, :]


@triton.jit(do_not_specialize=["M"])
def skinny_gemm_fwd_kernel_gemv_sk(x_ptr, w_ptr, out_ptr, ws_ptr, lock_ptr, M, N, K, stride_wn,
                                   steps, dp_tiles, units, per, BLOCK_N: tl.constexpr,
                                   BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """M == 1, data-parallel rounds then stream-K (:mod:`specpilot.kernels.common.streamk`):
    grid (P,); program p takes whole tiles p, p + P, ... below ``dp_tiles``, then K-step units
    ``[p*per, (p+1)*per)`` of the ``units`` of the remaining tiles. ``PDL``: launched as a
    programmatic dependent launch, waiting before any read or write."""
    p = tl.program_id(0)
    if PDL:
        gdc_wait()
    for tile in range(p, dp_tiles, tl.num_programs(0)):
        offs_n, y = gemv_segment(x_ptr, w_ptr, N, K, stride_wn, tile, 0, steps, BLOCK_N, BLOCK_K)
        store_tile(y, out_ptr, tl.arange(0, 1), offs_n, 1, N)
    u_lo, u_hi, tile, s_lo = streamk_range(p, per, units, steps)  # tile: from dp_tiles on
    u = u_lo
    while u < u_hi:
        s_hi = tl.minimum(steps, s_lo + (u_hi - u))
        offs_n, y = gemv_segment(x_ptr, w_ptr, N, K, stride_wn, dp_tiles + tile, s_lo, s_hi,
                                 BLOCK_N, BLOCK_K)
        store_streamk(y, out_ptr, ws_ptr, lock_ptr, tl.arange(0, 1), offs_n, 1, N, tile, s_lo,
                      s_hi, u == u_lo, p, per, steps, 1, BLOCK_N)
        u += s_hi - s_lo
        tile += 1
        s_lo = 0


@triton.jit(do_not_specialize=["M"])
def skinny_gemm_fwd_kernel_dot(x_ptr, w_ptr, out_ptr, ws_ptr, lock_ptr, M, N, K, stride_xm,
                               stride_wn, k_per_split, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
                               SPLIT_K: tl.constexpr, PREFETCH: tl.constexpr,
                               L2_PREFETCH: tl.constexpr, PDL: tl.constexpr,
                               MMA_V2: tl.constexpr):
    """Grid (N / BLOCK_N, M / BLOCK_T, SPLIT_K); ``x [M, K]``, ``w [N, K]`` -> ``out [M, N]``.
    ``PREFETCH``: the first K step's weight tile loads before :func:`pdl_start`, as in the GEMV
    (bit-identical result); ``L2_PREFETCH``: the next steps' weights are requested into L2 there
    (by the first token tile's programs). ``MMA_V2`` only keys the compile
    (:mod:`specpilot.kernels.common.mma`)."""
    pid_n = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    n_mask = offs_n < N
    t_mask = offs_t < M
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    x_cols = x_ptr + offs_t[None, :] * stride_xm
    k_lo = pid_k * k_per_split  # every split is non-empty (splitk_plan)
    k_hi = tl.minimum(k_lo + k_per_split, K)
    if PREFETCH:
        w_first = weight_tile(w_rows, n_mask, k_lo, k_hi, BLOCK_K)
    if L2_PREFETCH:
        if pid_t == 0:
            rows_to_l2(w_ptr, stride_wn, pid_n * BLOCK_N, N, k_lo, k_hi, BLOCK_K, BLOCK_N,
                       L2_PREFETCH)
    pdl_start(PDL)
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    k_rest = k_lo
    if PREFETCH:
        acc = dot_mac(acc, w_first, x_cols, t_mask, k_lo, k_hi, BLOCK_K)
        k_rest += BLOCK_K
    for k0 in range(k_rest, k_hi, BLOCK_K):
        acc = dot_mac(acc, weight_tile(w_rows, n_mask, k0, k_hi, BLOCK_K), x_cols, t_mask, k0,
                      k_hi, BLOCK_K)
    tile_id = pid_t * tl.num_programs(0) + pid_n
    store_splitk(tl.trans(acc), out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile_id, pid_k,
                 SPLIT_K)


@triton.jit(do_not_specialize=["M"])
def skinny_gemm_fwd_kernel_tma(w_desc, x_desc, out_ptr, ws_ptr, lock_ptr, M, N, K, k_per_split,
                               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                               BLOCK_T: tl.constexpr, SPLIT_K: tl.constexpr, PDL: tl.constexpr,
                               MMA_V2: tl.constexpr):
    """Grid (N / BLOCK_N, M / BLOCK_T, SPLIT_K); ``w_desc`` over ``w [N, K]`` in
    ``[BLOCK_N, BLOCK_K]`` boxes, ``x_desc`` over ``x [M, K]`` in ``[BLOCK_T, BLOCK_K]`` boxes ->
    ``out [M, N]``. The descriptors zero-fill past the tensor, so padding multiplies zeros and
    nothing is masked. Split s covers ``[s * k_per_split, ...)``, whole K steps (splitk_plan).
    ``MMA_V2`` only keys the compile (:mod:`specpilot.kernels.common.mma`)."""
    pid_n = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_k = tl.program_id(2)
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    pdl_start(PDL)
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        w = w_desc.load([pid_n * BLOCK_N, k0])
        x = x_desc.load([pid_t * BLOCK_T, k0])
        acc = dot_bf16(w, tl.trans(x), acc)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    tile_id = pid_t * tl.num_programs(0) + pid_n
    store_splitk(tl.trans(acc), out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile_id, pid_k,
                 SPLIT_K)


@triton.jit(do_not_specialize=["M"])
def skinny_gemm_fwd_kernel_tma_sk(w_desc, x_desc, out_ptr, ws_ptr, lock_ptr, M, N, K, steps,
                                  dp_tiles, units, per, BLOCK_N: tl.constexpr,
                                  BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
                                  PDL: tl.constexpr, MMA_V2: tl.constexpr):
    """M <= BLOCK_T, the TMA tiles under data-parallel rounds then stream-K
    (:mod:`specpilot.kernels.common.streamk`), as one flat loop over the program's K steps: grid
    (P,); program p streams whole row tiles p, p + P, ... below ``dp_tiles``, then K-step units
    ``[p*per, (p+1)*per)`` of the ``units`` of the remaining tiles, and stores each tile or
    segment where its last step falls. Step i's tile and K step are a function of i alone (no
    loop-carried index), so the pipeline copies the next steps' tiles while it multiplies, across
    tile boundaries too: the copies never drain between tiles, as they do in ``dot_sk``, whose
    K loop restarts for every tile. ``MMA_V2`` only keys the compile."""
    p = tl.program_id(0)
    programs = tl.num_programs(0)
    dp_steps = dp_tiles // programs * steps  # dp_tiles is whole rounds (streamk_split)
    u_lo, u_hi, _, _ = streamk_range(p, per, units, steps)
    total = dp_steps + tl.maximum(u_hi - u_lo, 0)
    offs_t = tl.arange(0, BLOCK_T)
    pdl_start(PDL)
    part_first = -1  # the tiles of this program's partial segments (-1: none)
    part_last = -1
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    for i in range(0, total):
        in_dp = i < dp_steps
        unit = tl.where(in_dp, i, u_lo + i - dp_steps)
        t = unit // steps
        s = unit - t * steps
        tile = tl.where(in_dp, p + t * programs, dp_tiles + t)
        w = w_desc.load([tile * BLOCK_N, s * BLOCK_K])
        x = x_desc.load([0, s * BLOCK_K])
        acc = dot_bf16(w, tl.trans(x), acc)
        if (s == steps - 1) | (i == total - 1):
            if in_dp | ((s == steps - 1) & (u_lo <= t * steps)):  # a whole tile
                store_tile(tl.trans(acc), out_ptr, offs_t, tile * BLOCK_N + tl.arange(0, BLOCK_N),
                           M, N)
            else:
                first = u_lo >= t * steps  # the range starts in this tile
                streamk_write(tl.trans(acc), ws_ptr, first, p, BLOCK_T, BLOCK_N)
                part_first = tl.where(first, t, part_first)
                part_last = tl.where(first, part_last, t)
            acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    # Counted after the loop: Triton pipelines no loop that holds a barrier or an atomic.
    for j in tl.static_range(2):  # the partial segment the range starts in, then ends in
        part = part_first if j == 0 else part_last
        if part >= 0:
            streamk_finish(out_ptr, ws_ptr, lock_ptr, offs_t,
                           (dp_tiles + part) * BLOCK_N + tl.arange(0, BLOCK_N), M, N, part, per,
                           steps, BLOCK_T, BLOCK_N)


def tma_descriptors(x: torch.Tensor, weight: torch.Tensor, block_n: int, block_k: int,
                    block_t: int) -> tuple[TensorDescriptor, TensorDescriptor]:
    """The TMA kernel's descriptors; the TMA needs 16-byte aligned starts and row strides."""
    for name, t in (("x", x), ("weight", weight)):
        if t.data_ptr() % 16 or (t.stride(0) * t.element_size()) % 16:
            raise ValueError(f"the tma kernel needs {name} to start 16-byte aligned with rows a "
                             f"multiple of 16 bytes apart (K a multiple of 8); got stride "
                             f"{t.stride(0)} at address {t.data_ptr():#x}")
    w_desc = TensorDescriptor(weight, list(weight.shape), [weight.stride(0), 1],
                              [block_n, block_k])
    x_desc = TensorDescriptor(x, list(x.shape), [x.stride(0), 1], [block_t, block_k])
    return w_desc, x_desc


@triton.jit
def dot_segment(x_ptr, w_ptr, M, N, K, stride_xm, stride_wn, tile, s_lo, s_hi,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr):
    """``(offs_t, offs_n, y [BLOCK_T, BLOCK_N])``: K steps ``[s_lo, s_hi)`` of row tile ``tile``
    of the swap-AB product for all M <= BLOCK_T tokens."""
    offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = tl.arange(0, BLOCK_T)
    n_mask = offs_n < N
    t_mask = offs_t < M
    w_rows = w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn
    x_cols = x_ptr + offs_t[None, :] * stride_xm
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    for s in range(s_lo, s_hi):
        k0 = s * BLOCK_K
        acc = dot_mac(acc, weight_tile(w_rows, n_mask, k0, K, BLOCK_K), x_cols, t_mask, k0, K,
                      BLOCK_K)
    return offs_t, offs_n, tl.trans(acc)


@triton.jit(do_not_specialize=["M"])
def skinny_gemm_fwd_kernel_dot_sk(x_ptr, w_ptr, out_ptr, ws_ptr, lock_ptr, M, N, K, stride_xm,
                                  stride_wn, steps, dp_tiles, units, per, BLOCK_N: tl.constexpr,
                                  BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
                                  PDL: tl.constexpr, MMA_V2: tl.constexpr):
    """M <= BLOCK_T, the swap-AB kernel under data-parallel rounds then stream-K
    (:mod:`specpilot.kernels.common.streamk`): grid (P,); program p takes whole row tiles p, p +
    P, ... below ``dp_tiles``, then K-step units ``[p*per, (p+1)*per)`` of the ``units`` of the
    remaining tiles. ``PDL``: a programmatic dependent launch, waiting before any read or
    write. ``MMA_V2`` only keys the compile (:mod:`specpilot.kernels.common.mma`)."""
    p = tl.program_id(0)
    if PDL:
        gdc_wait()
    for tile in range(p, dp_tiles, tl.num_programs(0)):
        offs_t, offs_n, y = dot_segment(x_ptr, w_ptr, M, N, K, stride_xm, stride_wn, tile, 0,
                                        steps, BLOCK_N, BLOCK_K, BLOCK_T)
        store_tile(y, out_ptr, offs_t, offs_n, M, N)
    u_lo, u_hi, tile, s_lo = streamk_range(p, per, units, steps)  # tile: from dp_tiles on
    u = u_lo
    while u < u_hi:
        s_hi = tl.minimum(steps, s_lo + (u_hi - u))
        offs_t, offs_n, y = dot_segment(x_ptr, w_ptr, M, N, K, stride_xm, stride_wn,
                                        dp_tiles + tile, s_lo, s_hi, BLOCK_N, BLOCK_K, BLOCK_T)
        store_streamk(y, out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile, s_lo, s_hi,
                      u == u_lo, p, per, steps, BLOCK_T, BLOCK_N)
        u += s_hi - s_lo
        tile += 1
        s_lo = 0


def skinny_gemm(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype | None = None,
                config: dict | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 times ``weight [N, K]`` bf16, transposed, fp32 accumulation -> ``[M, N]``.

    Same contract as :func:`specpilot.kernels.skinny_gemm.reference.skinny_gemm_ref`. ``config`` is
    one entry of the tuning space (see ``space.py``); None picks the tuned or default config.
    """
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"expected x [M, K] and weight [N, K], got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
        raise TypeError(f"skinny_gemm takes bf16 x and weight, got {x.dtype} and {weight.dtype}")
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=out_dtype or x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    plan = plan_skinny("skinny_gemm", config, m, n, k, k, x.device, space)
    cfg = plan.cfg
    hang_if_asked(x, cfg)
    meta = {"BLOCK_N": cfg["BLOCK_N"], "BLOCK_K": cfg["BLOCK_K"],
            "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if cfg["kernel"] == "gemv_sk":
        skinny_gemm_fwd_kernel_gemv_sk[(plan.programs,)](
            x, weight, out, plan.workspace, plan.locks, m, n, k, weight.stride(0),
            *plan.schedule, **plan.options, **meta)
        return corrupt_if_asked(out, cfg)
    if cfg["kernel"] == "dot_sk":
        with mma_v2_compile(cfg["MMA_V2"]):
            skinny_gemm_fwd_kernel_dot_sk[(plan.programs,)](
                x, weight, out, plan.workspace, plan.locks, m, n, k, x.stride(0),
                weight.stride(0), *plan.schedule, BLOCK_T=plan.rows, MMA_V2=bool(cfg["MMA_V2"]),
                **plan.options, **meta)
        return corrupt_if_asked(out, cfg)
    if cfg["kernel"] == "tma_sk":
        descs = tma_descriptors(x, weight, cfg["BLOCK_N"], cfg["BLOCK_K"], plan.rows)
        with mma_v2_compile(cfg["MMA_V2"]):
            skinny_gemm_fwd_kernel_tma_sk[(plan.programs,)](
                *descs, out, plan.workspace, plan.locks, m, n, k, *plan.schedule,
                BLOCK_T=plan.rows, MMA_V2=bool(cfg["MMA_V2"]), **meta, **pdl_launch(x.device))
        return corrupt_if_asked(out, cfg)
    meta["SPLIT_K"] = plan.splits
    if cfg["kernel"] == "tma":
        descs = tma_descriptors(x, weight, cfg["BLOCK_N"], cfg["BLOCK_K"], plan.block_t)
        with mma_v2_compile(cfg["MMA_V2"]):
            skinny_gemm_fwd_kernel_tma[(plan.grid_n, plan.grid_t, plan.splits)](
                *descs, out, plan.workspace, plan.locks, m, n, k, plan.k_per_split,
                BLOCK_T=plan.block_t, MMA_V2=bool(cfg["MMA_V2"]), **meta,
                **pdl_launch(x.device))
        return corrupt_if_asked(out, cfg)
    # rows must start 16-byte aligned for the L2 prefetch (prefetch.py)
    aligned = weight.stride(0) % 8 == 0 and weight.data_ptr() % 16 == 0
    meta["L2_PREFETCH"] = cfg["L2_PREFETCH"] if aligned else 0
    if plan.block_t is None:
        skinny_gemm_fwd_kernel_gemv[(plan.grid_n, plan.splits)](
            x, weight, out, plan.workspace, plan.locks, m, n, k, x.stride(0), weight.stride(0),
            plan.k_per_split, BLOCK_M=space.gemv_rows(m), K_STAGES=cfg["K_STAGES"], **meta,
            **pdl_launch(x.device))
    else:
        with mma_v2_compile(cfg["MMA_V2"]):
            skinny_gemm_fwd_kernel_dot[(plan.grid_n, plan.grid_t, plan.splits)](
                x, weight, out, plan.workspace, plan.locks, m, n, k, x.stride(0),
                weight.stride(0), plan.k_per_split, BLOCK_T=plan.block_t,
                PREFETCH=bool(cfg["PREFETCH"]), MMA_V2=bool(cfg["MMA_V2"]), **meta,
                **pdl_launch(x.device))
    return corrupt_if_asked(out, cfg)
