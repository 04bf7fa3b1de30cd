"""W12 skinny GEMM on fragment-order planes: ``out [M, N] = x [M, K] @ W[N, K]^T``, the weight
decoded in registers.

The planes (:mod:`specpilot.kernels.w12.format`, order ``"frag"``) are blocks of 16 rows x 32
pairs whose 512 bytes per plane sit in the order the ``mma.sync`` A operand's registers hold them.
A program's tile is ``W`` row blocks (``BLOCK_N = 16 * W`` rows: ``num_warps`` warps of
``ROWS_PER_WARP`` rows) by ``FC`` pair blocks (``BLOCK_K = 32 * FC`` pairs); :func:`tile_offsets`
lays its bytes out flat as (chunk, row block, lane, byte), so each plane's load is 16 contiguous
bytes per lane (a warp with two row blocks loads both) and :func:`frag_to_a`
(``reshape -> permute -> reshape``) turns the loaded bytes into the A operand's layout (Triton's
``dot_op`` with kWidth 4) with no layout conversion. Compiled with one stage, the planes go from
global memory straight to registers: no shared memory, so many more programs stay resident than
with a ``cp.async`` pipeline.

Three kernels:

- ``w12f_fwd_kernel_mma`` (any M): swap-AB ``mma.sync`` (weights as the 16-row operand, a tile of
  ``BLOCK_T`` tokens as the other), grid (M / BLOCK_T, row tiles, SPLIT_K).
- ``w12f_fwd_kernel_tma`` (any M, K a multiple of 16): the same tiles and products (the same
  bits), each K step's planes and x tiles copied into shared memory by the Tensor Memory
  Accelerator, ``num_stages`` steps in flight. The one-stage kernel keeps its bytes in flight in
  registers, so on the narrow projections (N = 5120, 6656: too few row tiles to fill the SMs) it
  needs split K and its reduction; the bf16 GEMM's winners there are TMA tiles, on q3_gdn_out and
  q3_down at M = 2-16 all with 4 stages and all but one of one warp
  (results/h200-2026-12-03-kernels-warmed.json). Compiled for sm_90a the planes leave shared
  memory as one 16-byte load per lane and chunk, in the A operand's layout
  (tests/kernels/test_w12f_gemm.py). On the H200 it trails the one-stage kernel by 7-13% at
  M = 2-16 (gate_up M = 16 aside) and, on 32-token tiles, by 2-4% at M = 32, where it leads on
  gate_up by 11%, and leads by 2-10% at M = 64 (results/h200-2026-12-03-w12f-tma-probe.json).
- ``w12f_fwd_kernel_gemv`` (M == 1): no MMA. Each thread multiplies its 16 bytes of a chunk by the
  x values of their columns and sums what it holds of each of its two rows (column bits c, e3,
  e1 e0 are its registers), so a K step leaves two partial sums per thread; the four lanes of a
  row are summed once, after the K loop.

Measured on the H200 against the rows-order kernels of :mod:`specpilot.kernels.w12_gemm`, each op's
sweep winners side by side (results/h200-2026-12-02-kernels-frag.json): at M = 2-16 faster on 29 of
the 32 Qwen3.8-27B / Muse-Glimmer-30B rows, by 1.2-12.5% (gate_up M = 4: 67.0 vs 71.7 us, 0.79x the
best bf16 GEMM; gdn_in M = 16 38.3 vs 43.8), slower on gdn_out at M = 2 and 16 by 5.8% and 2.6% and
level on mg_down at M = 16; at M = 1 the rows-order GEMV stays ahead on six of eight shapes
(down_proj 34.3 vs 38.4, a tie on the Muse shapes). In the speculative engine the target in
fragment order ran within 1% of rows order end to end (1.005x [1.000, 1.009] with a whole sweep's
configs, results/h200-2026-12-02-w12-ar-run29-seeded.json). Hence two ops and a recipe option
(``w12_order``), not one layout. The kernels were grown in ``experiments/h200_w12_frag.py``
(results/h200-2026-12-02-w12-frag-*.json). Loading the activations straight into the MMA operand
as well (a fragment layout whose lanes hold contiguous columns, x never in shared memory) was
0.97-1.23x slower: ptxas then spreads the loads through the K step
(results/h200-2026-12-02-kernels-frag-direct-x.json).

Two options the sweeps kept: ``PREFETCH`` (the split's first K step's planes loaded before the PDL
wait, under the previous kernel's tail: the MMA tiles 0.94-1.03x their twins without it,
results/h200-2026-12-02-kernels-prefetch.json) and ``CHAINS`` (independent accumulators per K step,
:func:`mma_step`: the 1-warp 256-pair tile's dependent ``HMMA`` chain is 32 deep with one; two
chains ran a median 0.986x of one, four 1.06x, results/h200-2026-12-02-kernels-chains.json). The
dependency chain is not what bounds the kernel: with both, the best W12 time per row moved 0-5%.
Nor did more bytes in flight per warp help: the K loop written out as straight-line code (ptxas
then issues a step's plane loads near the end of the previous step's MMAs, the x tile's barrier
between) was 0.96-1.50x the loop, and the next step's planes carried as loop values make Triton
pick a 2-wide operand and reorder the planes every step (results/h200-2026-12-03-w12f-unroll-probe
.json, commit c885787).

``WGMMA`` (4 or 8 warps, 16 or more tokens, ``MMA_V2`` 0, where Triton emits ``wgmma`` with the
A operand in registers and x in shared memory): ``wgmma`` reads a lane's A columns in the order
``2 t, 2 t + 1, 2 t + 8, 2 t + 9`` of each 16, where the planes hold ``4 t ... 4 t + 3``; in the
mma.sync labels Triton shuffles every plane byte across lanes (48 ``SHFL`` per K step on 4 warps
x 128 pairs). Any labelling of a K step's columns is a valid product as long as x's columns carry
the same one, so :func:`frag_to_a` can label the stored pair ``4 t + 2 e1 + e0`` of each 16 as
column ``8 e1 + 2 t + e0`` and :func:`label_x` moves x's pairs to match (in registers, after a
16-byte load): no shuffle, and the only cost a byte reorder inside each thread.

Escapes, split K and summation order follow :mod:`specpilot.kernels.w12_gemm.triton`: the split
that owns the first K steps applies the escapes, split partials are summed in split order by the
last program to arrive (same inputs, same bits).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from specpilot.kernels.common.epilogue import store_splitk
from specpilot.kernels.common.interpret import dot_acc
from specpilot.kernels.common.interpret import dot_bf16
from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.launch import lock_buffer
from specpilot.kernels.common.launch import num_sms
from specpilot.kernels.common.launch import resolve_config
from specpilot.kernels.common.launch import workspace
from specpilot.kernels.common.mma import mma_v2_compile
from specpilot.kernels.common.pdl import pdl_launch
from specpilot.kernels.common.pdl import pdl_start
from specpilot.kernels.common.test_keys import corrupt_if_asked
from specpilot.kernels.common.test_keys import hang_if_asked
from specpilot.kernels.w12.format import FRAG_PAIRS
from specpilot.kernels.w12.format import FRAG_ROWS
from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.triton import DECODE_ASM
from specpilot.kernels.w12.triton import w12_decode_scaled
from specpilot.kernels.w12.triton import window_scale
from specpilot.kernels.w12_gemm.triton import apply_escapes
from specpilot.kernels.w12_gemm.triton import escape_rows
from specpilot.kernels.w12_gemm.triton import w12_call
from specpilot.kernels.w12f_gemm import space

BLOCK_BYTES = FRAG_ROWS * FRAG_PAIRS  # one plane of one block
STEP_BYTES = 3 * BLOCK_BYTES  # the three planes of one block, stored one after the other
# The TMA box views each plane as 2 rows of 256 bytes (its longest box row) rather than 16 rows of
# 32: the same bytes land in shared memory in the same order, in 8x fewer box rows.
TMA_ROW_BYTES = BLOCK_BYTES // 2


@triton.jit
def tile_offsets(pid_n, RB, KB, W: tl.constexpr, FC: tl.constexpr):
    """Byte offsets of program ``pid_n``'s first K step, nib plane, flat as (chunk c, row block w,
    lane byte): block (row block ``W * pid_n + w``, pair block c). Row blocks past the last read
    the last (valid memory; those rows are never stored)."""
    i = tl.arange(0, W * FC * 512)
    row_block = tl.minimum(pid_n * W + (i // 512) % W, RB - 1)
    return (row_block.to(tl.int64) * KB + i // (W * 512)) * 1536 + i % 512


@triton.jit
def frag_to_a(t, FC: tl.constexpr, W: tl.constexpr, WGMMA: tl.constexpr = False):
    """A decoded plane tile as loaded (chunk, row block, lane (g, t), byte (e3, e2, e1 e0)) -> the
    ``[16 W, 32 FC]`` tile: byte e of lane (g, t) of row block w in chunk c is row ``16 w + 8 e2 +
    g``, pair column ``32 c + 16 e3 + 4 t + (e1 e0)``."""
    if WGMMA:
        t = tl.reshape(t, [FC, W, 8, 4, 2, 2, 2, 2])
        t = tl.permute(t, [1, 5, 2, 0, 4, 6, 3, 7])  # rows (w, e2, g), labels (c, e3, e1, t, e0)
    else:
        t = tl.reshape(t, [FC, W, 8, 4, 2, 2, 4])
        t = tl.permute(t, [1, 5, 2, 0, 4, 3, 6])  # rows (w, e2, g), pairs (c, e3, t, e1 e0)
    return tl.reshape(t, [16 * W, 32 * FC])


@triton.jit
def label_x(x, FS: tl.constexpr, WGMMA: tl.constexpr):
    """An x tile ``[32 FS, tokens]`` as loaded (stored pair order) -> in the A operand's column
    labels (:func:`frag_to_a`): itself, or under ``WGMMA`` the 16-pair groups' stored pairs
    ``4 t + 2 e1 + e0`` moved to labels ``8 e1 + 2 t + e0``."""
    if WGMMA:
        x = tl.reshape(x, [FS, 2, 4, 2, 2, x.shape[1]])
        x = tl.reshape(tl.permute(x, [0, 1, 3, 2, 4, 5]), [32 * FS, x.shape[5]])
    return x


@triton.jit
def load_planes(p):
    """The three planes of one K step (nib, low-half sm, high-half sm) at pointers ``p``."""
    nib = tl.load(p, eviction_policy="evict_first")
    sm_a = tl.load(p + 512, eviction_policy="evict_first")
    sm_b = tl.load(p + 1024, eviction_policy="evict_first")
    return nib, sm_a, sm_b


@triton.jit
def store_rows(y, scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, ws_ptr,
               lock_ptr, offs_t, offs_n, M, N, tile_id, pid_k, SPLIT_K: tl.constexpr,
               ESC_CHUNK: tl.constexpr, early=None, rows=None, DONE: tl.constexpr = False):
    """``y [tokens, rows]`` (fp32 sums of the scaled decode): scale, the rows' escapes (split 0
    only; ``early``: the sum of each row's first ``ESC_CHUNK`` escapes, :func:`early_escapes`, so
    only the rest are walked here; ``rows``: their ``(start, count)`` as :func:`escape_slots`
    loaded them, else loaded here), store (split K: :func:`store_splitk`). ``DONE``: ``y`` is
    already scaled with every escape added (``ESC_EARLY`` 4): store only."""
    if not DONE:
        y = y * scale
        if rows is None:
            start, count = escape_rows(row_ptr, offs_n, (offs_n < N) & (pid_k == 0))
        else:
            start, count = rows
        first = 0
        if early is not None:
            y += early
            first = ESC_CHUNK
        y = apply_escapes(y, x_ptr, stride_xm, offs_t, M, start, count, first, esc_col_ptr,
                          esc_delta_ptr, ESC_CHUNK)
    store_splitk(y, out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile_id, pid_k, SPLIT_K)


@triton.jit
def escape_slots(row_ptr, esc_col_ptr, esc_delta_ptr, offs_n, mask, ESC_CHUNK: tl.constexpr):
    """``(col, delta, start, count)``: ``[rows, ESC_CHUNK]``, the first ``ESC_CHUNK`` escapes of
    rows ``offs_n`` (column 0 and delta 0 past a row's count, or where ``mask`` is false), and
    the rows' escape ranges (:func:`escape_rows`). Weight data only, so loaded before the PDL
    wait."""
    start, count = escape_rows(row_ptr, offs_n, mask)
    slot = tl.arange(0, ESC_CHUNK)[None, :]
    has = slot < count[:, None]
    col = tl.load(esc_col_ptr + start[:, None] + slot, mask=has, other=0)
    delta = tl.load(esc_delta_ptr + start[:, None] + slot, mask=has, other=0.0)
    return col, delta, start, count


@triton.jit
def early_escapes(col, delta, x_ptr, stride_xm, offs_t, t_mask):
    """``[tokens, rows]``: ``sum_c delta[row, c] * x[token, col[row, c]]`` over the slots of
    :func:`escape_slots` (column 0 times delta 0 where a row has no escape left)."""
    xv = tl.load(x_ptr + offs_t[:, None, None] * stride_xm + col[None, :, :],
                 mask=t_mask[:, None, None], other=0.0)
    return tl.sum(xv.to(tl.float32) * delta[None, :, :], axis=2)


@triton.jit
def escape_run(row_ptr, row0, ROWS: tl.constexpr, N, active):
    """``(lo, hi)``: the escapes of rows ``row0 .. row0 + ROWS`` (past N: none), one run in CSR
    order; empty unless ``active`` (split 0)."""
    lo = tl.load(row_ptr + row0)
    return lo, tl.where(active, tl.load(row_ptr + tl.minimum(row0 + ROWS, N)), lo)


@triton.jit
def escape_slots_of_run(esc_col_ptr, values_ptr, e0, hi, SLOTS: tl.constexpr):
    """``(slot, col, value, has)`` ``[SLOTS]``: escapes ``e0, e0 + 1, ...`` below ``hi``, with
    their value at ``values_ptr`` (deltas or exact bits; column 0 and value 0 past ``hi``)."""
    slot = e0 + tl.arange(0, SLOTS)
    has = slot < hi
    col = tl.load(esc_col_ptr + slot, mask=has, other=0)
    value = tl.load(values_ptr + slot, mask=has, other=0)
    return slot, col, value, has


@triton.jit
def gather_x(x_ptr, stride_xm, offs_t, t_mask, col, has):
    """``[slots, tokens]``: x at the escapes' columns, only for slots that hold one."""
    return tl.load(x_ptr + offs_t[None, :] * stride_xm + col[:, None],
                   mask=has[:, None] & t_mask[None, :], other=0.0)


@triton.jit
def escape_mma(acc, xv, delta, slot, start, end):
    """``acc [rows, tokens]`` (sums already scaled) plus the escapes in ``slot``: x at their
    columns (``xv [slots, tokens]``, :func:`gather_x`) times their deltas in fp32, split into
    three bf16 parts (8 + 8 + 8 significant bits: exactly the fp32 product), each part added to
    its rows by an MMA with a one-hot ``[rows, slots]`` bf16 operand (1.0 where the slot is one of
    the row's escapes, ``start <= slot < end``)."""
    c = xv.to(tl.float32) * delta[:, None]
    c_hi = c.to(tl.bfloat16)
    rest = c - c_hi.to(tl.float32)
    c_mid = rest.to(tl.bfloat16)
    c_lo = (rest - c_mid.to(tl.float32)).to(tl.bfloat16)
    hot = tl.where((slot[None, :] >= start[:, None]) & (slot[None, :] < end[:, None]), 1.0,
                   0.0).to(tl.bfloat16)
    acc = dot_bf16(hot, c_hi, acc)
    acc = dot_bf16(hot, c_mid, acc)
    return dot_bf16(hot, c_lo, acc)


@triton.jit
def escape_mma_exact(acc, xv, bits, base, slot, start, end):
    """:func:`escape_mma` for bf16 x in two exact parts: each escape's correction is ``x *
    exact - x * decoded``, both weights bf16: ``bits`` (exact) and the same bits with the
    exponent clamped into the window ``[base, base + 15]`` (what the planes decode), so the
    one-hot operand carries them (``exact``, then ``-decoded``, where the slot is one of the
    row's escapes) and x goes to the MMA as gathered: two MMAs of exact products, no fp32
    product to split, and no delta to load. (A subnormal exact weight's product, below 2^-126
    ``|x|``, is lost if the tensor core flushes it, as the three-part split's smallest part
    can be.)"""
    b = bits.to(tl.int32) & 0xFFFF
    exp = tl.minimum(tl.maximum((b >> 7) & 0xFF, base), base + 15)
    exact = bits.to(tl.bfloat16, bitcast=True)
    neg_dec = ((b & 0x7F) | (exp << 7) | ((b & 0x8000) ^ 0x8000)).to(tl.int16).to(
        tl.bfloat16, bitcast=True)
    hot = (slot[None, :] >= start[:, None]) & (slot[None, :] < end[:, None])
    zero = tl.zeros([1, 1], dtype=tl.bfloat16)
    acc = dot_bf16(tl.where(hot, exact[None, :], zero), xv, acc)
    return dot_bf16(tl.where(hot, neg_dec[None, :], zero), xv, acc)


@triton.jit
def escape_round(acc, x_ptr, stride_xm, offs_t, t_mask, esc_col_ptr, esc_delta_ptr,
                 esc_bits_ptr, e0, hi, start, end, base, SLOTS: tl.constexpr,
                 PARTS: tl.constexpr, X_F32: tl.constexpr):
    """``acc`` (in the weights' units) plus the ``SLOTS`` escapes from ``e0`` (below ``hi``) of
    the rows whose escapes are ``[start, end)``: :func:`escape_mma_exact` (``PARTS`` 2, bf16 x;
    ``base``: the window's) or :func:`escape_mma` (``PARTS`` 3, or float32 x)."""
    if PARTS == 2 and not X_F32:
        slot, col, bits, has = escape_slots_of_run(esc_col_ptr, esc_bits_ptr, e0, hi, SLOTS)
        acc = escape_mma_exact(acc, gather_x(x_ptr, stride_xm, offs_t, t_mask, col, has), bits,
                               base, slot, start, end)
    else:
        slot, col, delta, has = escape_slots_of_run(esc_col_ptr, esc_delta_ptr, e0, hi, SLOTS)
        acc = escape_mma(acc, gather_x(x_ptr, stride_xm, offs_t, t_mask, col, has), delta, slot,
                         start, end)
    return acc


@triton.jit
def dot_halves(acc_a, acc_b, a, b, xa, xb, X_F32: tl.constexpr):
    """``(acc_a + a @ xa, acc_b + b @ xb)`` for decoded A tiles ``a`` (the low halves) and ``b``
    (the high) against their x tiles; ``acc_b`` None: one accumulator, ``acc_a`` returned twice.
    float32 x (``X_F32``): the weights widened, an IEEE float32 dot."""
    if X_F32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    acc_a = dot_acc(a, xa, acc_a, X_F32)
    if acc_b is None:
        acc_a = dot_acc(b, xb, acc_a, X_F32)
        acc_b = acc_a
    else:
        acc_b = dot_acc(b, xb, acc_b, X_F32)
    return acc_a, acc_b


@triton.jit
def mma_halves(acc_a, acc_b, nib, sm_a, sm_b, x_cols, t_mask, j0, K, K2, FS: tl.constexpr,
               W: tl.constexpr, ASM: tl.constexpr, X_F32: tl.constexpr,
               WGMMA: tl.constexpr = False):
    """:func:`dot_halves` of the ``FS``-chunk tile of planes loaded at pair column ``j0``, decoded,
    against its x columns."""
    offs_j = j0 + tl.arange(0, 32 * FS)
    xa = tl.load(x_cols + offs_j[:, None], mask=(offs_j < K2)[:, None] & t_mask[None, :],
                 other=0.0)
    xb = tl.load(x_cols + K2 + offs_j[:, None], mask=(K2 + offs_j < K)[:, None] & t_mask[None, :],
                 other=0.0)
    xa = label_x(xa, FS, WGMMA)
    xb = label_x(xb, FS, WGMMA)
    a = frag_to_a(w12_decode_scaled(sm_a, nib, False, ASM), FS, W, WGMMA)
    b = frag_to_a(w12_decode_scaled(sm_b, nib, True, ASM), FS, W, WGMMA)
    return dot_halves(acc_a, acc_b, a, b, xa, xb, X_F32)


@triton.jit
def mma_step(acc0, acc1, acc2, acc3, p, x_cols, t_mask, s, K, K2, FC: tl.constexpr,
             FS: tl.constexpr, W: tl.constexpr, CHAINS: tl.constexpr, ASM: tl.constexpr,
             X_F32: tl.constexpr, early=None, WGMMA: tl.constexpr = False):
    """The accumulators plus K step ``s`` (planes at ``p``, or ``early``: the first sub-step's,
    loaded before the PDL wait). ``CHAINS`` independent MMA accumulator chains: 1 (``acc0``
    only), 2 (low halves into ``acc0``, high halves into ``acc1``), 4 (the step as two sub-steps
    of ``FS = FC / 2`` chunks, into ``acc0, acc1`` and ``acc2, acc3``; else ``FS = FC``)."""
    if early is None:
        nib, sm_a, sm_b = load_planes(p)
    else:
        nib, sm_a, sm_b = early
    if CHAINS == 4:
        nib1, sm_a1, sm_b1 = load_planes(p + FS * 1536)
    j0 = s * (32 * FC)
    if CHAINS == 1:
        acc0, _ = mma_halves(acc0, None, nib, sm_a, sm_b, x_cols, t_mask, j0, K, K2, FS, W, ASM,
                             X_F32, WGMMA)
    else:
        acc0, acc1 = mma_halves(acc0, acc1, nib, sm_a, sm_b, x_cols, t_mask, j0, K, K2, FS, W,
                                ASM, X_F32, WGMMA)
    if CHAINS == 4:
        acc2, acc3 = mma_halves(acc2, acc3, nib1, sm_a1, sm_b1, x_cols, t_mask, j0 + 32 * FS, K,
                                K2, FS, W, ASM, X_F32, WGMMA)
    return acc0, acc1, acc2, acc3


@triton.jit(do_not_specialize=["M", "base"])  # base: one kernel whatever the window
def w12f_fwd_kernel_mma(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, ws_ptr,
                        lock_ptr, M, N, K, K2, RB, KB, stride_xm, scale, steps_per_split,
                        esc_bits_ptr, base, W: tl.constexpr, FC: tl.constexpr,
                        BLOCK_T: tl.constexpr,
                        SPLIT_K: tl.constexpr, ASM: tl.constexpr, X_F32: tl.constexpr,
                        ESC_CHUNK: tl.constexpr, PREFETCH: tl.constexpr, CHAINS: tl.constexpr,
                        PDL: tl.constexpr, MMA_V2: tl.constexpr, ESC_EARLY: tl.constexpr,
                        WGMMA: tl.constexpr, ESC_PARTS: tl.constexpr = 3):
    """Grid (M / BLOCK_T, N / (16 W), SPLIT_K): split ``pid_k`` takes K steps ``[pid_k *
    steps_per_split, ...)`` of ``FC`` pair blocks each (``FC`` divides ``KB``, the pair blocks
    per row: the launcher checks; no split is empty), summed in ``CHAINS`` independent accumulators
    (:func:`mma_step`) added together at the end. float32 x (``X_F32``): the decoded weights
    widened, an IEEE float32 dot. ``PDL``: nothing a kernel of the step writes is read before the
    previous kernel has finished; with ``PREFETCH`` the split's first K step's planes (its first
    sub-step's, with 4 chains) load before that wait, under the previous kernel's tail (the same
    products in the same order: the same bits). ``MMA_V2`` only keys Triton's cache
    (:mod:`specpilot.kernels.common.mma` picks the instruction). ``ESC_EARLY``: each row's first
    ``ESC_CHUNK`` escapes load before the PDL wait and their x values right after it, in the
    same straight-line block as the first K step (with ``PREFETCH``), so the epilogue waits on
    memory only for rows with more escapes than that; ``ESC_EARLY`` 2: the same escapes fetched
    before the wait, their x values gathered after the K loop instead (one round of loads in the
    epilogue, none in the prologue, where the first K step's planes and x tile hold the most
    registers); ``ESC_EARLY`` 3: the rows' escape ranges load before the wait and the whole walk
    of :func:`apply_escapes` runs right after it, before the K loop, so split 0's walk overlaps
    the other programs' streaming instead of adding to the kernel's tail, and only its sums (one
    fp32 per token and row) stay live through the loop; ``ESC_EARLY`` 4: after the K loop, the
    program's escapes ``32 ESC_CHUNK`` at a time: their columns and deltas in one load each, x
    gathered for the escapes that exist, added to their rows by tensor-core MMAs
    (:func:`escape_mma`): two dependent loads per round where the walk takes two per escape of
    the row with the most (holding anything through the K loop cost the 4-warp tiles 30-70
    registers: the first round's loads before the PDL wait were no faster on any M = 16 row of
    the H200, results/h200-2026-12-04-w12f-esc-mma-early.json; nor were the run's bounds loaded
    before the wait, or the first round's columns, deltas and x loaded during a peeled last K
    step: ...-w12f-esc-mma-last-step.json. A round's cost is its code, about 620 instructions a
    thread on the 2-warp 256-pair tile, most of them the one-hot operand and its trip through
    shared memory: qkvg 1.8 us at M = 16 over the same planes without escapes,
    ...-w12f-esc-mma-clean.json); ``ESC_EARLY`` 8: those rounds inside the K loop, one per
    iteration after its step's plane loads are issued, so a round's loads and code run while the
    planes are in flight rather than in a tail where none are; split s takes rounds s, s +
    ``SPLIT_K``, ... (split K spreads them where 4 leaves all to split 0), into their own
    accumulator added after the sums are scaled; rounds past the loop's iterations run after it.
    ``ESC_PARTS`` 2 (bf16 x) makes a round two MMAs of exact products
    (:func:`escape_mma_exact`) instead of three of the split fp32 product: on the 2-warp 256-pair
    16-token tile ``ESC_EARLY`` 4's 64-slot round compiles to 331 instructions a thread instead
    of 624. Neither is timed on the H200 yet; compiled for sm_90a, that tile takes 254 registers
    with ``ESC_EARLY`` 8 and 32-slot rounds (no spill with either part count; 64-slot rounds
    spill 96-180 bytes inside the loop) against 241 with ``ESC_EARLY`` 4, and the 8-token tile
    250-255 against 174. Without any, the epilogue loads the rows' escape ranges and walks them
    all, two dependent loads per escape."""
    FS: tl.constexpr = FC // 2 if CHAINS == 4 else FC
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * (16 * W) + tl.arange(0, 16 * W)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = offs_t < M
    tiles = planes_ptr + tile_offsets(pid_n, RB, KB, W, FS)
    x_cols = x_ptr + offs_t[None, :] * stride_xm
    s_lo = pid_k * steps_per_split
    s_hi = tl.minimum(KB // FC, s_lo + steps_per_split)
    if PREFETCH:
        early = load_planes(tiles + s_lo * (FC * 1536))
    rows = None
    if ESC_EARLY == 3:
        esc_start, esc_count = escape_rows(row_ptr, offs_n, (offs_n < N) & (pid_k == 0))
    elif ESC_EARLY == 1 or ESC_EARLY == 2:  # 4 loads its escapes after the K loop
        esc_col, esc_delta, esc_start, esc_count = escape_slots(
            row_ptr, esc_col_ptr, esc_delta_ptr, offs_n, (offs_n < N) & (pid_k == 0), ESC_CHUNK)
        rows = (esc_start, esc_count)
    pdl_start(PDL)
    esc = None
    if ESC_EARLY == 1:
        esc = early_escapes(esc_col, esc_delta, x_ptr, stride_xm, offs_t, t_mask)
    if ESC_EARLY == 3:
        # the whole walk now, while the other splits stream; none is left for the epilogue
        esc = apply_escapes(tl.zeros([BLOCK_T, 16 * W], dtype=tl.float32), x_ptr, stride_xm,
                            offs_t, M, esc_start, esc_count, 0, esc_col_ptr, esc_delta_ptr,
                            ESC_CHUNK)
        rows = (esc_start, esc_count * 0)
    acc0 = tl.zeros([16 * W, BLOCK_T], dtype=tl.float32)
    acc1 = acc0
    acc2 = acc0
    acc3 = acc0
    if PREFETCH:
        acc0, acc1, acc2, acc3 = mma_step(acc0, acc1, acc2, acc3, tiles + s_lo * (FC * 1536),
                                          x_cols, t_mask, s_lo, K, K2, FC, FS, W, CHAINS, ASM,
                                          X_F32, early, WGMMA)
    if ESC_EARLY == 8:  # every split takes rounds: pid_k, pid_k + SPLIT_K, ...
        esc_start, esc_count = escape_rows(row_ptr, offs_n, offs_n < N)
        esc_lo, esc_hi = escape_run(row_ptr, pid_n * (16 * W), 16 * W, N, True)
        esc_end = esc_start + esc_count
        acc_e = tl.zeros([16 * W, BLOCK_T], dtype=tl.float32)  # escapes' sums, not scaled
    for s in range(s_lo + PREFETCH, s_hi):
        planes = None
        if ESC_EARLY == 8:
            # this step's planes are in flight while the split's next round (if any) runs
            planes = load_planes(tiles + s * (FC * 1536))
            e0 = esc_lo + (pid_k + (s - s_lo - PREFETCH) * SPLIT_K) * (32 * ESC_CHUNK)
            if e0 < esc_hi:
                acc_e = escape_round(acc_e, x_ptr, stride_xm, offs_t, t_mask, esc_col_ptr,
                                     esc_delta_ptr, esc_bits_ptr, e0, esc_hi, esc_start,
                                     esc_end, base, 32 * ESC_CHUNK, ESC_PARTS, X_F32)
        acc0, acc1, acc2, acc3 = mma_step(acc0, acc1, acc2, acc3, tiles + s * (FC * 1536),
                                          x_cols, t_mask, s, K, K2, FC, FS, W, CHAINS, ASM,
                                          X_F32, planes, WGMMA)
    if CHAINS >= 2:
        acc0 += acc1
    if CHAINS == 4:
        acc0 += acc2 + acc3
    if ESC_EARLY == 8:  # rounds the loop had no step for
        looped = tl.maximum(s_hi - s_lo - PREFETCH, 0)
        for e0 in range(esc_lo + (pid_k + looped * SPLIT_K) * (32 * ESC_CHUNK), esc_hi,
                        SPLIT_K * (32 * ESC_CHUNK)):
            acc_e = escape_round(acc_e, x_ptr, stride_xm, offs_t, t_mask, esc_col_ptr,
                                 esc_delta_ptr, esc_bits_ptr, e0, esc_hi, esc_start, esc_end,
                                 base, 32 * ESC_CHUNK, ESC_PARTS, X_F32)
        acc0 = acc0 * scale + acc_e
    if ESC_EARLY == 2:
        esc = early_escapes(esc_col, esc_delta, x_ptr, stride_xm, offs_t, t_mask)
    if ESC_EARLY == 4:
        acc0 = acc0 * scale
        esc_start, esc_count = escape_rows(row_ptr, offs_n, (offs_n < N) & (pid_k == 0))
        esc_lo, esc_hi = escape_run(row_ptr, pid_n * (16 * W), 16 * W, N, pid_k == 0)
        for e0 in range(esc_lo, esc_hi, 32 * ESC_CHUNK):
            acc0 = escape_round(acc0, x_ptr, stride_xm, offs_t, t_mask, esc_col_ptr,
                                esc_delta_ptr, esc_bits_ptr, e0, esc_hi, esc_start,
                                esc_start + esc_count, base, 32 * ESC_CHUNK, ESC_PARTS,
                                X_F32)
    store_rows(tl.trans(acc0), scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr,
               out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, pid_t * tl.num_programs(1) + pid_n,
               pid_k, SPLIT_K, ESC_CHUNK, esc, rows, ESC_EARLY == 4 or ESC_EARLY == 8)


@triton.jit
def tile_to_a(t, FC: tl.constexpr, W: tl.constexpr):
    """:func:`frag_to_a` for a tile loaded as (row block, chunk, lane, byte), the order of the
    planes in memory (what a TMA box over them holds)."""
    t = tl.reshape(t, [W, FC, 8, 4, 2, 2, 4])
    t = tl.permute(t, [0, 5, 2, 1, 4, 3, 6])  # rows (w, e2, g), pairs (c, e3, t, e1 e0)
    return tl.reshape(t, [16 * W, 32 * FC])


@triton.jit(do_not_specialize=["M"])
def w12f_fwd_kernel_tma(planes_desc, x_desc, x_ptr, row_ptr, esc_col_ptr, esc_delta_ptr,
                        out_ptr, ws_ptr, lock_ptr, M, N, KB, stride_xm, scale, steps_per_split,
                        W: tl.constexpr, FC: tl.constexpr, BLOCK_T: tl.constexpr,
                        SPLIT_K: tl.constexpr, ASM: tl.constexpr, ESC_CHUNK: tl.constexpr,
                        CHAINS: tl.constexpr, PDL: tl.constexpr, MMA_V2: tl.constexpr,
                        ESC_EARLY: tl.constexpr):
    """The tiles, K steps, accumulator chains (1 or 2), escapes and split K of
    :func:`w12f_fwd_kernel_mma` (the same products in the same order: the same bits), with each
    K step's planes and x tiles copied into shared memory by the Tensor Memory Accelerator
    (host-built descriptors, :func:`tma_descriptors`) in a ``num_stages``-deep pipeline, so the
    bytes in flight are bounded by shared memory rather than by registers: ``planes_desc`` over
    the planes viewed as ``[RB, KB, 3, 2, 256]`` in ``[W, FC, 4, 2, 256]`` boxes (all three
    planes in one copy, the fourth zero-filled past the tensor and never read out of shared
    memory: half the copies and barriers of a box per plane, 24% less code on the 2-warp 128-pair
    tile; 256-byte box rows, not the 32-byte rows of the stored ``[16, 32]`` plane: 0.73-0.83x
    the time on the H200, results/h200-2026-12-03-w12f-tma-probe.json), ``x_desc``
    over x as its two halves ``[M, 2, K2]`` (K = 2 K2) in ``[BLOCK_T, 2, 32 FC]`` boxes: one copy
    for both (two separate ones compiled to 20% more TMA issues and barriers and 24 more
    registers). The descriptors zero-fill past M and past K2, so the padding's decoded weights
    multiply zeros and nothing is masked; row blocks past the last read zeros and are never
    stored. Each plane leaves shared memory as one 16-byte load per lane and chunk, already in
    the A operand's layout."""
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * (16 * W) + tl.arange(0, 16 * W)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = offs_t < M
    s_lo = pid_k * steps_per_split
    s_hi = tl.minimum(KB // FC, s_lo + steps_per_split)
    rows = None
    if ESC_EARLY > 0:
        esc_col, esc_delta, esc_start, esc_count = escape_slots(
            row_ptr, esc_col_ptr, esc_delta_ptr, offs_n, (offs_n < N) & (pid_k == 0), ESC_CHUNK)
        rows = (esc_start, esc_count)
    pdl_start(PDL)
    esc = None
    if ESC_EARLY == 1:
        esc = early_escapes(esc_col, esc_delta, x_ptr, stride_xm, offs_t, t_mask)
    acc0 = tl.zeros([16 * W, BLOCK_T], dtype=tl.float32)
    acc1 = acc0
    for s in range(s_lo, s_hi):
        # planes (p1, p0) -> the last two dims; plane 3 is the box's zero fill, never loaded
        t = tl.reshape(planes_desc.load([pid_n * W, s * FC, 0, 0, 0]), [W, FC, 2, 2, 512])
        low, high = tl.split(tl.permute(t, [0, 1, 4, 2, 3]))
        nib, sm_b = tl.split(low)
        sm_a, _ = tl.split(high)
        xa, xb = tl.split(tl.permute(x_desc.load([pid_t * BLOCK_T, 0, s * (32 * FC)]), [0, 2, 1]))
        xa = tl.trans(xa)
        xb = tl.trans(xb)
        a = tile_to_a(w12_decode_scaled(sm_a, nib, False, ASM), FC, W)
        b = tile_to_a(w12_decode_scaled(sm_b, nib, True, ASM), FC, W)
        if CHAINS == 1:
            acc0, _ = dot_halves(acc0, None, a, b, xa, xb, False)
        else:
            acc0, acc1 = dot_halves(acc0, acc1, a, b, xa, xb, False)
    if CHAINS == 2:
        acc0 += acc1
    if ESC_EARLY == 2:
        esc = early_escapes(esc_col, esc_delta, x_ptr, stride_xm, offs_t, t_mask)
    store_rows(tl.trans(acc0), scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr,
               out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, pid_t * tl.num_programs(1) + pid_n,
               pid_k, SPLIT_K, ESC_CHUNK, esc, rows)


@triton.jit
def gemv_step(acc, nib, sm_a, sm_b, p, x_ptr, cols, s, K, K2, FC: tl.constexpr,
              W: tl.constexpr, ASM: tl.constexpr):
    """``acc`` plus K step ``s`` of the GEMV (planes loaded; ``sm_b`` None: loaded here, from
    ``p``, after the low half's products)."""
    j = s * (32 * FC) + cols
    xa = tl.load(x_ptr + j, mask=j < K2, other=0.0).to(tl.float32)
    xb = tl.load(x_ptr + K2 + j, mask=K2 + j < K, other=0.0).to(tl.float32)
    w = w12_decode_scaled(sm_a, nib, False, ASM).to(tl.float32)
    acc += tl.sum(tl.sum(tl.sum(tl.reshape(w, [FC, W, 8, 4, 2, 2, 4]) * xa, axis=6), axis=4),
                  axis=0)
    if sm_b is None:
        sm_b = tl.load(p + 1024, eviction_policy="evict_first")
    w = w12_decode_scaled(sm_b, nib, True, ASM).to(tl.float32)
    acc += tl.sum(tl.sum(tl.sum(tl.reshape(w, [FC, W, 8, 4, 2, 2, 4]) * xb, axis=6), axis=4),
                  axis=0)
    return acc


@triton.jit(do_not_specialize=["M"])
def w12f_fwd_kernel_gemv(x_ptr, planes_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, ws_ptr,
                         lock_ptr, M, N, K, K2, RB, KB, stride_xm, scale, steps_per_split,
                         W: tl.constexpr, FC: tl.constexpr, SPLIT_K: tl.constexpr,
                         ASM: tl.constexpr, ESC_CHUNK: tl.constexpr, PREFETCH: tl.constexpr,
                         PDL: tl.constexpr):
    """M == 1, grid (1, N / (16 W), SPLIT_K), the same tiles and K steps (and ``PREFETCH``) as
    the MMA kernel."""
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * (16 * W) + tl.arange(0, 16 * W)
    tiles = planes_ptr + tile_offsets(pid_n, RB, KB, W, FC)
    # the pair column of each held byte: 32 c + 16 e3 + 4 t + (e1 e0), shaped as the tile
    cols = (tl.arange(0, FC)[:, None, None, None, None, None, None] * 32
            + tl.arange(0, 4)[None, None, None, :, None, None, None] * 4
            + tl.arange(0, 2)[None, None, None, None, :, None, None] * 16
            + tl.arange(0, 4)[None, None, None, None, None, None, :])
    s_lo = pid_k * steps_per_split
    s_hi = tl.minimum(KB // FC, s_lo + steps_per_split)
    if PREFETCH:
        nib, sm_a, sm_b = load_planes(tiles + s_lo * (FC * 1536))
    pdl_start(PDL)
    acc = tl.zeros([W, 8, 4, 2], dtype=tl.float32)
    if PREFETCH:
        acc = gemv_step(acc, nib, sm_a, sm_b, tiles + s_lo * (FC * 1536), x_ptr, cols, s_lo, K,
                        K2, FC, W, ASM)
    for s in range(s_lo + PREFETCH, s_hi):
        p = tiles + s * (FC * 1536)
        nib = tl.load(p, eviction_policy="evict_first")
        sm_a = tl.load(p + 512, eviction_policy="evict_first")
        acc = gemv_step(acc, nib, sm_a, None, p, x_ptr, cols, s, K, K2, FC, W, ASM)
    y = tl.reshape(tl.permute(tl.sum(acc, axis=2), [0, 2, 1]), [1, 16 * W])  # rows (w, e2, g)
    store_rows(y, scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, ws_ptr,
               lock_ptr, tl.arange(0, 1), offs_n, M, N, pid_n, pid_k, SPLIT_K, ESC_CHUNK)


def tma_descriptors(x: torch.Tensor, packed: W12Tensor, w: int, fc: int,
                    block_t: int) -> tuple[TensorDescriptor, TensorDescriptor]:
    """The TMA kernel's descriptors (planes; x as its two halves ``[M, 2, K2]``); the TMA needs
    16-byte aligned starts and strides, so K = 2 K2 with K2 a multiple of 8 (the space checks
    K % 16)."""
    m, k = x.shape
    k2 = packed.k_half
    if x.data_ptr() % 16 or (x.stride(0) * x.element_size()) % 16 or k2 % 8 or k != 2 * k2:
        raise ValueError("the tma kernel needs x to start 16-byte aligned with rows and halves "
                         f"(K={k}, K2={k2}) multiples of 16 bytes")
    if packed.planes.data_ptr() % 16 or not packed.planes.is_contiguous():
        raise ValueError("the tma kernel needs contiguous, 16-byte aligned planes")
    rows = packed.planes.view(*packed.planes.shape[:2], 3, 2, TMA_ROW_BYTES)
    planes = TensorDescriptor.from_tensor(rows, [w, fc, 4, 2, TMA_ROW_BYTES])
    halves = TensorDescriptor(x, [m, 2, k2], [x.stride(0), k2, 1], [block_t, 2, FRAG_PAIRS * fc])
    return planes, halves


def w12f_gemm(x: torch.Tensor, packed: W12Tensor, out_dtype: torch.dtype | None = None,
              config: dict | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 (or float32) times the fragment-order W12 weight ``[N, K]`` transposed
    -> ``[M, N]``, fp32 accumulation; the contract of :func:`specpilot.kernels.w12_gemm.w12_gemm`
    (``config``: an entry of ``space.py``; None picks the tuned or default config)."""
    x, out, done = w12_call("w12f_gemm", x, packed, "frag", out_dtype)
    if done:
        return out
    m, k = x.shape
    n, k2 = packed.shape[0], packed.k_half
    x_f32 = x.dtype == torch.float32
    if x_f32 and config is None:  # tuned entries are bf16 timings
        config = space.default_config(m, n, k, num_sms(x.device))
    cfg = resolve_config("w12f_gemm", config, m, n, k, x.device, space)
    hang_if_asked(x, cfg)
    if x_f32 and cfg["kernel"] == "tma":
        raise ValueError("the tma kernel copies bf16 x tiles: run float32 x on the mma kernel "
                         "(the default config does)")
    if x_f32 and cfg["kernel"] == "mma" and cfg["num_stages"] > 1:
        raise ValueError("float32 x doubles the x tiles the space budgets shared memory for: "
                         "run it with num_stages 1 (the default config does)")
    rb, kb = packed.planes.shape[:2]
    fc = cfg["BLOCK_K"] // FRAG_PAIRS
    steps = kb // fc
    steps_per_split = cdiv(steps, cfg["SPLIT_K"])
    splits = cdiv(steps, steps_per_split)
    gemv = cfg["kernel"] == "gemv"
    w = space.row_blocks(cfg)
    grid = (1 if gemv else cdiv(m, cfg["BLOCK_T"]), cdiv(rb, w), splits)
    ws, lock = workspace(splits, m, n, x.device), lock_buffer(x.device, grid[0] * grid[1])
    meta = {"W": w, "FC": fc, "SPLIT_K": splits, "ASM": DECODE_ASM[cfg["DECODE"]],
            "ESC_CHUNK": cfg["ESC_CHUNK"], "num_warps": cfg["num_warps"],
            "num_stages": cfg["num_stages"], **pdl_launch(x.device)}
    if cfg["kernel"] == "tma":
        descs = tma_descriptors(x, packed, w, fc, cfg["BLOCK_T"])
        with mma_v2_compile(cfg["MMA_V2"]):
            w12f_fwd_kernel_tma[grid](*descs, x, packed.row_ptr, packed.esc_col, packed.esc_delta,
                                      out, ws, lock, m, n, kb, x.stride(0),
                                      window_scale(packed.base), steps_per_split,
                                      BLOCK_T=cfg["BLOCK_T"], CHAINS=cfg["CHAINS"],
                                      ESC_EARLY=cfg["ESC_EARLY"], MMA_V2=bool(cfg["MMA_V2"]),
                                      **meta)
        return corrupt_if_asked(out, cfg)
    args = (x, packed.planes, packed.row_ptr, packed.esc_col, packed.esc_delta, out, ws, lock, m,
            n, k, k2, rb, kb, x.stride(0), window_scale(packed.base), steps_per_split)
    meta["PREFETCH"] = cfg["PREFETCH"]
    if gemv:
        w12f_fwd_kernel_gemv[grid](*args, **meta)
    else:
        with mma_v2_compile(cfg["MMA_V2"]):
            w12f_fwd_kernel_mma[grid](*args, packed.esc_bits, packed.base, BLOCK_T=cfg["BLOCK_T"],
                                      X_F32=x_f32, ESC_PARTS=cfg["ESC_PARTS"],
                                      CHAINS=cfg["CHAINS"], ESC_EARLY=cfg["ESC_EARLY"],
                                      MMA_V2=bool(cfg["MMA_V2"]), WGMMA=bool(cfg["WGMMA"]),
                                      **meta)
    return corrupt_if_asked(out, cfg)
