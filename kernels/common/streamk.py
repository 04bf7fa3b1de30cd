"""Stream-K scheduling for the M == 1 GEMVs and the swap-AB kernels (M <= 64, one token tile):
every program streams about as many K steps.

Why: a GEMV program that owns whole tiles runs a serial chain of K steps. With one program per tile
(or per tile and split) the grid is rarely a whole number of "waves" of resident programs, so the
last programs run nearly alone, each waiting on one memory latency per K step: a candidate for
the ~5-8 us fixed cost per GEMM that REFERENCE-kernels.md §3.1 fits (and that the W12 GEMM pays on
every projection of a decode step; results/h200-2026-11-30-w12-kernels-run5.json).

The schedule (:func:`streamk_split`), with ``P`` programs (the resident slots: SMs x programs per
SM): whole rounds of ``P`` tiles go data-parallel, program p taking tiles p, p + P, ..., so the
programs running at once stream neighbouring rows of the weight (H200 run 7,
results/h200-2026-11-30-w12-kernels-run7.json: a pure stream-K split, each program on its own
stretch of the matrix, streamed the lm_head 8% slower than the grid GEMV at the same occupancy).
The K steps of the remaining tiles (fewer than ``P``) are cut into contiguous ranges of ``per``
steps, one per program. Every index is int32: 64-bit divisions cost registers, and with them
resident programs.

A shared range touches at most two tiles (``per`` <= steps, since fewer than ``P`` tiles remain):
it may start inside one and end inside the next. A segment that covers a whole tile is stored
directly. A partial segment writes its fp32 partial to the workspace slot ``(program, 0 if it is
the program's first segment else 1)`` and bumps the tile's counter; the program that arrives last
sums the tile's partials in program order (so the same inputs give the same bits, whatever order
programs finish in), stores, and resets the counter to 0 (the counter buffer stays reusable and
CUDA-graph safe, as in :mod:`specpilot.kernels.common.epilogue`).

Measured on the H200 (runs 6-8, results/h200-2026-11-30-w12-kernels-run{6,7,8}.json): slower than
the grid GEMVs on every decode shape of Qwen3.8-27B, bf16 and W12 alike, with the data-parallel
rounds too (W12 lm_head 484.7 vs 453.2 us, gate_up 76.8 vs 71.9 us): a program that loops over
tiles streams less than fresh CTAs do, and that costs more than the tail it removes. The kernels
stay in the tuning spaces (``gemv_sk``), one config in each SWEEP, so other GPUs measure them too.

The swap-AB kernels (``dot_sk``) have the opposite profile: a few large tiles per SM rather than
dozens of small ones. Nsight Compute on the H200 (results/h200-2026-12-01-w12-ncu.json) had the
W12 grid kernel's 1088 gate_up tiles at 1.65 waves and its SMs idle 17% of the time at M = 4-16,
and split-K down_proj idle 33%; their tiles here are ``[token tile, BLOCK_N]``
(:func:`store_streamk`'s ``BLOCK_M`` rows).

The TMA swap-AB kernel under this schedule (``tma_sk``) streams a program's K steps as one flat
loop, so its copies run on across tile boundaries; its partial segments are only written in the
loop (:func:`streamk_write`) and counted after it (:func:`streamk_finish`), since Triton leaves
a loop that holds an atomic or a barrier unpipelined. On the H200 it lost every row it ran at
M = 16-64, by 0.5-24% (results/h200-2026-12-03-tma-sk-probe.json). Held to one whole tile per
program (the grid's work), the flat loop ran within 1-5% of the grid at the same stages; spread
over all 132 SMs, the 80-tile gdn_out ran slower than on 80 of them (23.5 vs 21.7 us at M = 32;
results/h200-2026-12-03-tma-sk-programs-probe.json, Nsight Compute 53% against 65% of DRAM peak
in ...-tma-sk-ncu.json): what the narrow shapes lose is not the idle SMs.
"""

import triton
import triton.language as tl


def streamk_split(tiles: int, steps: int, slots: int) -> tuple[int, int, int]:
    """``(dp_tiles, programs, per)``: whole rounds of ``slots`` tiles go data-parallel (program p
    takes tiles p, p + slots, ...: the programs running at once stream neighbouring rows), and the
    K steps of the remaining tiles are shared, ``per = cdiv(units, programs)`` each, so every
    index stays in int32 and a unit's owner is one division."""
    slots = max(1, slots)
    dp_tiles = tiles // slots * slots
    programs = slots if dp_tiles else min(slots, tiles * steps)
    units = (tiles - dp_tiles) * steps
    return dp_tiles, programs, max(1, -(-units // programs))


@triton.jit
def streamk_range(p, per, units, steps):
    """Program ``p``'s shared K-step units ``[u_lo, u_hi)`` and where they start: ``(u_lo, u_hi,
    tile, s_lo)``, the tile counted from the first shared one and the K step inside it."""
    u_lo = p * per
    tile = u_lo // steps
    return u_lo, tl.minimum(u_lo + per, units), tile, u_lo - tile * steps


@triton.jit
def store_tile(y, out_ptr, offs_m, offs_n, M, N):
    """A whole tile's ``y [BLOCK_M, BLOCK_N]`` to rows ``offs_m``, columns ``offs_n`` of the
    contiguous ``out [M, N]`` (past M or N masked)."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], y.to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def store_streamk(y, out_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, tile, s_lo, s_hi, first,
                  p, per, steps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Store segment ``[s_lo, s_hi)`` of ``tile``'s K steps: ``y [BLOCK_M, BLOCK_N]`` (fp32) is the
    segment's sum for rows ``offs_m`` and output columns ``offs_n`` of ``out [M, N]`` (the GEMVs:
    one row); ``first``: the segment is program ``p``'s first; program q streams units
    ``[q * per, (q + 1) * per)``. A partial segment is written (:func:`streamk_write`), then
    counted, and summed by the program that arrives last at the tile (:func:`streamk_finish`).
    """
    if (s_lo == 0) & (s_hi == steps):
        store_tile(y, out_ptr, offs_m, offs_n, M, N)
    else:
        streamk_write(y, ws_ptr, first, p, BLOCK_M, BLOCK_N)
        streamk_finish(out_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, tile, per, steps,
                       BLOCK_M, BLOCK_N)


@triton.jit
def streamk_write(y, ws_ptr, first, p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """A partial segment's ``y`` (fp32) to program ``p``'s workspace slot: 0 if the segment is its
    first, else 1. ``ws_ptr``: fp32 ``[programs, 2, BLOCK_M, BLOCK_N]``."""
    cells = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(ws_ptr + (p * 2 + tl.where(first, 0, 1)) * (BLOCK_M * BLOCK_N) + cells, y)


@triton.jit
def streamk_finish(out_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, tile, per, steps,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Count a written partial at ``tile`` (``lock_ptr``: an int32 counter per tile, zero on entry
    and left zero on exit); the program that arrives last (every other partial is written by then)
    sums the tile's partials in program order (the same bits whatever order programs finished
    in), stores them to rows ``offs_m``, columns ``offs_n`` and resets the counter."""
    # Every thread's partial store happens before the (release) counter bump.
    tl.debug_barrier()
    q_lo = tile * steps // per
    q_hi = (tile * steps + steps - 1) // per
    if tl.atomic_add(lock_ptr + tile, 1, sem="acq_rel") == q_hi - q_lo:
        cells = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for q in range(q_lo, q_hi + 1):
            # The tile is q's first segment iff q's range starts inside it.
            q_slot = tl.where(q * per >= tile * steps, 0, 1)
            # .cg: read from L2, never a stale L1 line.
            total += tl.load(ws_ptr + (q * 2 + q_slot) * (BLOCK_M * BLOCK_N) + cells,
                             cache_modifier=".cg")
        store_tile(total, out_ptr, offs_m, offs_n, M, N)
        tl.atomic_xchg(lock_ptr + tile, 0)
