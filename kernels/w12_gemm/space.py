"""Tuning space of the W12 skinny GEMM, as data (STYLE.md item 10).

Like ``skinny_gemm/space.py`` plus ``DECODE`` ("int": plain Triton integer decode, runs anywhere;
"prmt": inline-PTX decode of 4 weights per call, GPU only, straight to fp32 in the GEMV; GEMV
only, "prmt-bf16": the PTX decode to bf16 pairs, widened to fp32 by Triton: more instructions,
fewer live registers), ``ESC_CHUNK`` (escapes applied per row in unrolled chunks of this many: the
epilogue waits on about two memory latencies per chunk;
measured on the H200, results/h200-2026-11-30-w12-escapes.json: on seed-like weights the epilogue
costs at most ~1 us and chunks do not pay, on the tuner's outlier-rich weights they are mixed).
``ESC_EARLY`` (GEMV, 1: on) fetches each row's first ``ESC_CHUNK`` escapes and their x values under
the first two K steps, so only rows with more escapes wait at the program's tail. On the H200 the
escape epilogue costs ~1 us per call (results/h200-2026-11-30-w12-anatomy.json); ESC_EARLY won
down_proj and out_proj in run 10 and gate_up in run 12, and lost elsewhere
(results/h200-2026-11-30-w12-kernels-run{10,12}.json), so the sweep decides.
``PREFETCH`` (swap-AB kernel, 1: on) loads the first K step's weight tiles before the PDL wait,
under the previous kernel's tail, as the M = 1 GEMV always does (H200 runs 20-23,
results/h200-2026-12-01-w12-ar-run2*.json: with the GEMVs' prefetch, W12 AR decode ran at
1.250-1.263x over cuBLAS, against 1.219-1.244x in runs 17-19; the swap-AB kernels' is unmeasured).
``MMA_V2`` (swap-AB kernel, 1: ``mma.sync`` also for tiles of 4+ warps, where Triton would
emit ``wgmma`` on sm_90, :mod:`specpilot.kernels.common.mma`).
``BLOCK_T_MIN`` (swap-AB kernels: M is padded to a power of two at least this, 16 before it
existed) lets M <= 8 run on a token tile of 8 or 4. Why: in the 32 x 128-pair, 3-stage kernel the
two x tiles of 16 tokens take 16 of its 40 KB of shared memory, which bounds it to 5 programs
per SM on the H200 (results/h200-2026-12-02-w12-ncu-streamk.json). For sm_90a (ptxas, no GPU
needed) a tile of 8 tokens compiles to 32 KB and 67 registers (16: 40 KB, 96) and 2.43 SASS
instructions per weight in the K loop (2.98), half the HMMAs; 4 tokens: 28 KB, 63, 2.35.
Measured on the H200 (results/h200-2026-12-02-kernels-t-min.json): 8-token tiles won 16 of the 40
W12 rows at M <= 16 and 4-token tiles 2; the best W12 time at M = 4-8 moved by -9%..+0.6%
(gdn_out most). Nsight Compute (...-w12-ncu-t-min.json): 6 programs per SM instead of 5 and
83.4 vs 85.0 us on gate_up at M = 4; the 4-token tile, 7 per SM, took 93.1.
``L2_PREFETCH`` (GEMV and swap-AB kernel; 0: off, GPU only) requests the planes' blocks of that
many K steps after the first into L2 before the PDL wait
(:mod:`specpilot.kernels.common.prefetch`), so HBM streams them while the previous kernel ends;
on the H200 no gain beyond noise (results/h200-2026-12-01-l2-prefetch.json), so no SWEEP entry
has it (``experiments/h200_l2_prefetch.py`` and the ``--l2`` option of the H200 scripts measure
it).
``gemv`` runs M = 1 or 2 rows (:data:`specpilot.kernels.skinny_gemm.space.GEMV_MAX_M`), decoding
each weight once for both, with ``ESC_EARLY`` off at M = 2. On the H200 at M = 2 it beat the
swap-AB kernel on 4 of 8 decode shapes (gdn_out 18.6 vs 20.0 us, down_proj 41.5 vs 44.3;
results/h200-2026-12-01-kernels-m2-4-gemv-rows.json); for 4 rows it lost on all 8 (1.8-2.3x: the
per-row FMAs and x loads on the CUDA cores), so it stops at 2.
``BLOCK_T`` (swap-AB kernel; 0: M padded to a power of two in [``BLOCK_T_MIN``, 64], one token tile
up to M = 64, tiles of 64 past it) splits M into tiles of that many tokens, each a program that
decodes the same weights; the tiles of one weight tile launch next to each other, so that the later
ones find the weights in L2 (the L2 hit rate was not measured). Why: the kernel's registers grow
with its token tile (for sm_90, ptxas: 32 x 128 pairs on 2 warps uses 96 registers at 16 tokens,
182 at 32, and 255 with 200 bytes spilled at 64), and at M = 32 and 64 the W12 GEMM ran 1.3-3x
slower than the bf16 one (results/h200-2026-12-01-kernels-all.json). With token tiles in the sweep
it ran up to 21% faster at M = 64 (gdn_out, down_proj; within 1% on gdn_in, gate_up, lm_head) and
up to 12% at M = 32, still 1.2-2.5x the bf16 GEMM: each tile repeats the decode, which points at
the decode's integer work as the bound (results/h200-2026-12-01-kernels-m16-64-token-tiles.json,
...-w12-dot-probe-m32-64.json).
``K_STAGES`` (GEMV) software-pipelines its K loop: that many K steps in flight per warp through
shared memory (``cp.async``), 1 for none. ``BLOCK_K`` counts *pairs* of columns: one iteration
decodes ``sm[:, j:j+BLOCK_K]`` (low half)
and ``sm[:, K2+j:K2+j+BLOCK_K]`` (high half), so it covers ``2 * BLOCK_K`` weights per row.

``gemv_sk`` (measured slower than ``gemv`` on every H200 shape: see SWEEP) is the M == 1 GEMV
under a stream-K schedule (:mod:`specpilot.kernels.common.streamk`):
``PROGRAMS_PER_SM`` programs per SM take whole rounds of tiles, then share the remainder's K
steps equally, so no program runs the tail alone;
``PDL`` (1: launched as a programmatic dependent launch, sm_90+, GPU only) lets its launch overlap
the previous kernel's teardown; ``MAX_REGS`` (0: none) caps its registers per thread (ptxas
``-maxrregcount``), so more programs stay resident at the price of a few spills.

``dot_sk`` (M <= 64, one token tile) is the swap-AB kernel under the same schedule: whole rounds
of row tiles, then every program an equal share of the remaining tiles' K steps (partial tiles
summed in program order, so the bits do not depend on timing), against the partial last wave
that leaves the grid kernel's SMs idle 17% of the time at M = 4-16 on the H200
(results/h200-2026-12-01-w12-ncu.json). ``PROGRAMS_PER_SM`` should be what fits on an SM (shared
memory bounds the 32 x 128, 3-stage kernel at 5 on sm_90): more runs in waves again.

Not in the space: a GEMV that loads the next K step's tiles into registers before decoding this
step's (run 5, results/h200-2026-11-30-w12-ar-run5.json): 55 -> 136 registers at 8 x 256 on sm_90
and 1.6-2.2x slower on every shape (fewer programs per SM). The split-K GEMV (16 x 256, 2 splits)
won down_proj and out_proj in that run.
"""

import itertools
from collections.abc import Iterator

from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.skinny_gemm.space import L2_STEPS
from specpilot.kernels.skinny_gemm.space import block_t
from specpilot.kernels.skinny_gemm.space import check_gemv_tile
from specpilot.kernels.skinny_gemm.space import check_config_keys
from specpilot.kernels.skinny_gemm.space import check_launch
from specpilot.kernels.skinny_gemm.space import check_param
from specpilot.kernels.skinny_gemm.space import check_t_min
from specpilot.kernels.skinny_gemm.space import gemv_rows
from specpilot.kernels.skinny_gemm.space import kernels_for as bf16_kernels_for
from specpilot.kernels.skinny_gemm.space import m_bucket
from specpilot.kernels.skinny_gemm.space import token_tile as one_token_tile
from specpilot.kernels.w12.format import block_pairs_for

__all__ = ["KEY", "PARAMS", "SWEEP", "block_t", "configs", "default_config", "gemv_rows",
           "kernels_for", "m_bucket", "token_tile", "validate"]

KEY = ("M_BUCKET", "N", "K")

PARAMS = {
    "gemv": {
        "BLOCK_N": [4, 8, 16, 32, 64],
        "BLOCK_K": [64, 128, 256, 512],
        "SPLIT_K": [1, 2, 4, 8],
        "num_warps": [1, 2, 4, 8],
        "num_stages": [1, 2, 3, 4],
        "K_STAGES": [1, 2, 3, 4],
        "DECODE": ["int", "prmt", "prmt-bf16"],
        "ESC_CHUNK": [1, 2, 4, 8],
        "ESC_EARLY": [0, 1],
        "L2_PREFETCH": L2_STEPS,
    },
    "gemv_sk": {
        "BLOCK_N": [8, 16, 32],
        "BLOCK_K": [64, 128, 256, 512],
        "PROGRAMS_PER_SM": [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 18],
        "MAX_REGS": [0, 48, 56, 64, 96],
        "num_warps": [2, 4, 8],
        "num_stages": [1],  # its loops hold no tl.dot and are not pipelined
        "DECODE": ["int", "prmt"],
        "ESC_CHUNK": [1, 2, 4],
        "PDL": [0, 1],
    },
    "dot": {
        "BLOCK_N": [16, 32, 64, 128, 256],
        "BLOCK_K": [32, 64, 128, 256],
        "SPLIT_K": [1, 2, 4, 8],
        "num_warps": [1, 2, 4, 8],
        "num_stages": [2, 3, 4, 5],
        "DECODE": ["int", "prmt"],
        "ESC_CHUNK": [1, 2, 4, 8],
        "PREFETCH": [0, 1],
        "L2_PREFETCH": L2_STEPS,
        "BLOCK_T": [0, 16, 32],
        "MMA_V2": [0, 1],
        "BLOCK_T_MIN": [16, 8, 4],
    },
    "dot_sk": {
        "BLOCK_N": [16, 32, 64, 128],
        "BLOCK_K": [64, 128, 256],
        "PROGRAMS_PER_SM": [1, 2, 3, 4, 5, 6, 8, 10, 12, 16],
        "MAX_REGS": [0, 96, 128],
        "num_warps": [1, 2, 4, 8],
        "num_stages": [2, 3, 4],
        "DECODE": ["int", "prmt"],
        "ESC_CHUNK": [1, 2, 4],
        "PDL": [0, 1],
        "BLOCK_T_MIN": [16, 8, 4],
    },
}


def kernels_for(m: int) -> list[str]:
    """The bf16 space's kernel families for M that this space has (no ``tma``: its copies are of
    bf16 tiles)."""
    return [k for k in bf16_kernels_for(m) if k in PARAMS]


def configs() -> Iterator[dict]:
    """Every config of the space, lazily (the product runs to hundreds of thousands)."""
    for kernel, params in PARAMS.items():
        for values in itertools.product(*params.values()):
            yield {"kernel": kernel, **dict(zip(params, values))}


# Starting points: the GEMV after the REFERENCE-kernels.md §3.4 prototype (8-16 x 256-512); the
# swap-AB kernel with BLOCK_N = 16 x num_warps (mma.sync, the A operand decoded in registers) at
# 128-256 pairs of columns per step, and one wgmma shape (4 warps) for comparison.


def _config(kernel: str, block_n: int, block_k: int, split_k: int, num_warps: int,
            num_stages: int, decode: str, esc_chunk: int = 1, k_stages: int = 1,
            esc_early: int = 0, prefetch: int = 0, l2: int = 0, block_t: int = 0,
            mma_v2: int = 0, t_min: int = 16) -> dict:
    config = {"kernel": kernel, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k,
              "num_warps": num_warps, "num_stages": num_stages, "DECODE": decode,
              "ESC_CHUNK": esc_chunk, "L2_PREFETCH": l2}
    return ({**config, "K_STAGES": k_stages, "ESC_EARLY": esc_early} if kernel == "gemv"
            else {**config, "PREFETCH": prefetch, "BLOCK_T": block_t, "MMA_V2": mma_v2,
                  "BLOCK_T_MIN": t_min})


def _dot_sk(block_n: int, block_k: int, num_warps: int, num_stages: int,
            programs_per_sm: int) -> dict:
    return {"kernel": "dot_sk", "BLOCK_N": block_n, "BLOCK_K": block_k,
            "PROGRAMS_PER_SM": programs_per_sm, "MAX_REGS": 0, "num_warps": num_warps,
            "num_stages": num_stages, "DECODE": "prmt", "ESC_CHUNK": 1, "PDL": 0,
            "BLOCK_T_MIN": 16}


def _streamk(block_n: int, block_k: int, programs_per_sm: int, num_warps: int, max_regs: int,
             pdl: int = 0) -> dict:
    return {"kernel": "gemv_sk", "BLOCK_N": block_n, "BLOCK_K": block_k,
            "PROGRAMS_PER_SM": programs_per_sm, "MAX_REGS": max_regs, "num_warps": num_warps,
            "num_stages": 1, "DECODE": "prmt", "ESC_CHUNK": 1, "PDL": pdl}


SWEEP = [
    _config("gemv", 16, 256, 1, 4, 3, "prmt"),
    _config("gemv", 8, 256, 1, 4, 3, "prmt"),
    _config("gemv", 16, 512, 2, 4, 3, "prmt"),
    _config("gemv", 16, 256, 2, 4, 3, "prmt"),
    # The K loop software-pipelined (cp.async): 8 x 256 keeps 56 registers and takes 14 KiB of
    # shared memory at 3 stages on sm_90, so as many programs stay resident as unpipelined. H200
    # run 9 (results/h200-2026-11-30-w12-kernels-run9.json), 8 x 256 against itself unpipelined:
    # down_proj 45.0 -> 39.4 us and out_proj 18.7 -> 17.6 at 4 stages, in_proj +3%, gate_up and
    # lm_head +1% (2 stages: 5-11% slower); against each shape's best config (the split-K GEMV on
    # down_proj, 39.6 us) no gain beyond noise.
    _config("gemv", 8, 256, 1, 4, 3, "prmt", k_stages=2),
    _config("gemv", 8, 256, 1, 4, 3, "prmt", k_stages=3),
    _config("gemv", 8, 256, 1, 4, 3, "prmt", k_stages=4),
    _config("gemv", 16, 256, 2, 4, 3, "prmt", k_stages=3),
    _config("gemv", 8, 256, 2, 4, 3, "prmt", k_stages=3),
    _config("gemv", 8, 128, 1, 4, 3, "prmt", k_stages=4),
    # Longer K steps and fewer rows per program, and escapes fetched under the first K steps
    # (ESC_EARLY). H200 (results/h200-2026-11-30-w12-anatomy.json): the decode and FMA put ~6 us on
    # gate_up over the same loop streaming the bytes without them (70.3 vs 63.7 us), and the
    # escape epilogue ~1 us on every shape; a 4 x 512 GEMV over a blocked copy of the planes took
    # 66.1 us.
    _config("gemv", 8, 256, 1, 4, 3, "prmt", esc_chunk=4, k_stages=4, esc_early=1),
    _config("gemv", 8, 512, 1, 4, 3, "prmt"),
    _config("gemv", 8, 512, 1, 4, 3, "prmt", esc_chunk=4, esc_early=1),
    _config("gemv", 8, 512, 1, 4, 3, "prmt", esc_chunk=4, k_stages=2, esc_early=1),
    _config("gemv", 4, 512, 1, 2, 3, "prmt"),
    _config("gemv", 4, 512, 1, 2, 3, "prmt", esc_chunk=4, esc_early=1),
    _config("gemv", 4, 512, 1, 2, 3, "prmt", esc_chunk=4, k_stages=3, esc_early=1),
    _config("gemv", 4, 512, 1, 2, 3, "prmt", esc_chunk=8, esc_early=1),
    _config("gemv", 4, 256, 1, 1, 3, "prmt", esc_chunk=4, esc_early=1),
    # Around the blocked layout's winners (4 x 512, 2 warps; c4f1933 sweep in
    # results/h200-2026-11-30-w12-kernels-run12.json): pipeline depth with and without ESC_EARLY.
    _config("gemv", 4, 512, 1, 2, 3, "prmt", k_stages=3),
    _config("gemv", 4, 512, 1, 2, 3, "prmt", esc_chunk=4, k_stages=2, esc_early=1),
    _config("gemv", 4, 512, 1, 2, 3, "prmt", esc_chunk=4, k_stages=4, esc_early=1),
    _config("gemv", 8, 512, 1, 4, 3, "prmt", esc_chunk=4, k_stages=3, esc_early=1),
    _config("gemv", 4, 256, 1, 1, 3, "prmt", esc_chunk=4, k_stages=3, esc_early=1),
    # The same with the PTX decode to bf16 pairs, widened by Triton: with bit layout 2's fp32
    # decode ptxas gives this one-warp pipelined GEMV 158 registers instead of 127 (12 warps per
    # SM instead of 16); this way 125, for 5.59 K-loop instructions per weight instead of 5.08
    # (experiments/sass_per_weight.py). The GPU decides.
    _config("gemv", 4, 256, 1, 1, 3, "prmt-bf16", esc_chunk=4, k_stages=3, esc_early=1),
    # Not kept: 16 pairs of columns per thread per K step instead of 32 (4 x 256 on 2 warps,
    # 4 x 128 on 1). Nsight Compute had the 2-row GEMV at 163 registers, 11 warps per SM and 68%
    # of DRAM peak against 78% for the 1-row one (results/h200-2026-12-01-w12-ncu.json); these
    # compile to 92 registers at 2 rows, yet ran 11-20% slower there; at M = 1 they won only the
    # two Muse shapes, by 1.6% at most (results/h200-2026-12-01-kernels-gemv-16-per-thread.json).
    # So the 2-row GEMV is not bound by its registers.
    _config("dot", 32, 128, 1, 2, 3, "prmt"),
    _config("dot", 32, 128, 2, 2, 4, "prmt"),
    _config("dot", 32, 256, 1, 2, 3, "prmt"),
    _config("dot", 16, 128, 1, 1, 4, "prmt"),
    _config("dot", 16, 256, 2, 1, 3, "prmt"),
    _config("dot", 64, 128, 1, 2, 3, "prmt"),
    _config("dot", 32, 128, 4, 2, 3, "prmt"),
    _config("dot", 64, 64, 2, 4, 3, "prmt"),
    _config("dot", 32, 128, 1, 2, 3, "int"),
    # The first K step's weight tiles loaded before the PDL wait (the GEMV always does), against
    # the same configs without.
    _config("dot", 32, 128, 1, 2, 3, "prmt", prefetch=1),
    _config("dot", 32, 128, 2, 2, 4, "prmt", prefetch=1),
    _config("dot", 16, 128, 1, 1, 4, "prmt", prefetch=1),
    # Bit layout 2's grid at M = 4-16 (results/h200-2026-12-01-w12-dot-probe-layout2.json and
    # ...-stages.json, weights with 5x the sweep's outliers): 4 stages or 256-pair steps with
    # split K on the down and out projections, one warp of 16 rows on the attention projection,
    # 256-pair steps with 2 stages on gate_up. Unpipelined (num_stages 1, not a choice) lost on
    # every shape and M: 124-234 registers, 9-32% over the best pipelined config.
    _config("dot", 32, 128, 4, 2, 4, "prmt"),
    _config("dot", 32, 128, 2, 2, 3, "prmt"),
    _config("dot", 32, 128, 1, 2, 4, "prmt"),
    _config("dot", 32, 256, 1, 2, 2, "prmt"),
    _config("dot", 16, 128, 1, 1, 3, "prmt"),
    _config("dot", 16, 128, 4, 1, 3, "prmt"),
    _config("dot", 32, 256, 4, 2, 3, "prmt"),
    # M above 16 (BLOCK_T = 16) or 32 (BLOCK_T = 32) as tiles of that many tokens (BLOCK_T must
    # split M: below, these are invalid and skipped).
    _config("dot", 32, 128, 1, 2, 3, "prmt", block_t=16),
    _config("dot", 32, 64, 1, 2, 4, "prmt", block_t=16),
    _config("dot", 32, 128, 4, 2, 3, "prmt", block_t=16),
    _config("dot", 32, 64, 1, 2, 4, "prmt", block_t=32),
    _config("dot", 64, 64, 1, 2, 4, "prmt", block_t=16),
    # 64-row tiles on 4 warps kept on mma.sync (MMA_V2, kernels/common/mma.py; on wgmma they decode
    # slower): within -3%..+4% of 32 x 2 in an H200 probe at M = 4-16, ahead on gate_up, gdn_in
    # and mg_gate_up by 1-3% (results/h200-2026-12-02-mma-v2-probe-w12.json).
    _config("dot", 64, 128, 1, 4, 2, "prmt", mma_v2=1),
    _config("dot", 64, 128, 2, 4, 2, "prmt", mma_v2=1),
    # Token tiles of 8 and 4 for M <= 8 (BLOCK_T_MIN; refused at M >= 16), on the winners at
    # M = 4-8 of the sweeps so far: unmeasured.
    _config("dot", 32, 128, 1, 2, 3, "prmt", t_min=8),
    _config("dot", 32, 128, 1, 2, 3, "prmt", t_min=4),
    _config("dot", 32, 256, 1, 2, 2, "prmt", t_min=8),
    _config("dot", 32, 256, 1, 2, 3, "prmt", t_min=8),
    _config("dot", 32, 128, 2, 2, 3, "prmt", t_min=8),
    _config("dot", 32, 128, 4, 2, 4, "prmt", t_min=8),
    _config("dot", 16, 128, 1, 1, 3, "prmt", t_min=8),
    _config("dot", 64, 128, 1, 4, 2, "prmt", mma_v2=1, t_min=8),
    # One stream-K GEMV, so every sweep re-measures it. On the H200 it lost to the grid GEMV on
    # every shape in runs 6-8 (results/h200-2026-11-30-w12-kernels-run{6,7,8}.json), at 7, 8 and 9
    # programs per SM (MAX_REGS 56), pure stream-K and with data-parallel rounds, PDL on and off:
    # lm_head 484.7 vs 453.2 us, gate_up 76.8 vs 71.9 us in run 8. A program that loops over
    # tiles streams less than fresh CTAs do, and that costs more than the tail it removes.
    _streamk(8, 256, 8, 4, 0),
    # The swap-AB kernel's winners under the stream-K schedule, at the programs per SM that their
    # shared memory allows on sm_90 (40 KB per program at 32 x 128 and 3 stages: 5). Nsight
    # Compute on the H200 (results/h200-2026-12-01-w12-ncu.json): the grid kernel keeps its SMs
    # busy 83% of the time at M = 4-16 (the GEMV 93%), its 1088 gate_up tiles being 1.65 waves,
    # and split-K down_proj 67%. Measured (results/h200-2026-12-02-kernels-dot-sk.json,
    # ...-w12-ncu-streamk.json): one full wave, but slower than the grid kernel on all shapes but
    # gdn_in at M = 8-16 (gate_up M = 4: 86.2 vs 81.3 us under ncu), at 168 registers instead of
    # 96; kept so that every sweep re-measures them.
    _dot_sk(32, 128, 2, 3, 5),
    _dot_sk(32, 128, 2, 3, 4),
    _dot_sk(32, 256, 2, 2, 5),
    _dot_sk(16, 128, 1, 3, 8),
]

# Parameters a kernel gained after configs were stored, with the value that runs it as before
# (the tuned cache and committed results complete older configs with these:
# kernels.tuning.ops.complete_config).
ADDED_DEFAULTS = {"gemv": {"K_STAGES": 1, "ESC_EARLY": 0, "L2_PREFETCH": 0},
                  "dot": {"PREFETCH": 0, "L2_PREFETCH": 0, "BLOCK_T": 0, "MMA_V2": 0,
                          "BLOCK_T_MIN": 16},
                  "dot_sk": {"BLOCK_T_MIN": 16}}

TEST_ONLY_KEYS = ("_test_corrupt", "_test_hang", "_test_programs")
MAX_GRID_Y = 65535  # CUDA's limit on grid axes 1 and 2; the swap-AB kernel's row tiles are axis 1
_SMEM_BUDGET = 160 * 1024


def validate(config: dict, m: int, n: int, k: int) -> None:
    """Raise ValueError naming the field if ``config`` cannot run ``[m, k] x W12[n, k]^T``."""
    kernel = check_config_keys(config, PARAMS, TEST_ONLY_KEYS)
    for name, choices in PARAMS[kernel].items():
        check_param(name, config[name], choices)
    check_launch(config)
    pairs = block_pairs_for(cdiv(k, 2))
    if pairs % config["BLOCK_K"]:
        raise ValueError(f"BLOCK_K={config['BLOCK_K']} pairs does not divide the W12 planes' "
                         f"{pairs}-pair blocks at K={k}")
    if kernel not in kernels_for(m):
        raise ValueError(f"kernel {kernel!r} cannot run M={m} (allowed: {kernels_for(m)})")
    if kernel in ("gemv", "gemv_sk"):
        check_gemv_tile(config, m)
    else:
        if config["BLOCK_N"] < 16 or config["BLOCK_K"] < 16:
            raise ValueError("dot needs BLOCK_N >= 16 and BLOCK_K >= 16 (tl.dot minimum)")
        check_t_min(config, m)
        if config.get("BLOCK_T", 0) >= block_t(m):
            raise ValueError(f"BLOCK_T={config['BLOCK_T']} does not split M={m} (one tile of "
                             f"{block_t(m)} tokens covers it): 0 says that")
        if kernel == "dot" and cdiv(n, config["BLOCK_N"]) > MAX_GRID_Y:
            raise ValueError(f"BLOCK_N={config['BLOCK_N']} makes {cdiv(n, config['BLOCK_N'])} "
                             f"row tiles at N={n}, over the {MAX_GRID_Y} CUDA allows on the grid "
                             "axis that holds them: take a wider BLOCK_N")
        stage = (3 * config["BLOCK_N"] * config["BLOCK_K"]
                 + 4 * config["BLOCK_K"] * token_tile(config, m))
        if config["num_stages"] * stage > _SMEM_BUDGET:
            raise ValueError(f"dot pipeline needs {config['num_stages'] * stage} B of shared "
                             f"memory > {_SMEM_BUDGET}")


def token_tile(config: dict, m: int) -> int:
    """The swap-AB kernel's token tile: ``BLOCK_T``, or with 0 M padded to a power of two in
    [``BLOCK_T_MIN``, 64] (the bf16 kernel's tile, :func:`one_token_tile`)."""
    return config.get("BLOCK_T") or one_token_tile(config, m)


def _split_for(num_tiles: int, k_iters: int, num_sms: int, ctas_per_sm: int) -> int:
    split = 1
    while split < 8 and num_tiles * split < ctas_per_sm * num_sms and k_iters // (split * 2) >= 4:
        split *= 2
    return split


def default_config(m: int, n: int, k: int, num_sms: int = 132) -> dict:
    """The untuned choice (logged by the launcher when used). It decodes with ``"int"``: the PTX
    decode is chosen only by a tuning run whose results passed the reference check on that GPU."""
    k2 = cdiv(k, 2)
    pairs = block_pairs_for(k2)
    if m == 1:
        step = min(256, pairs)
        split = _split_for(cdiv(n, 16), cdiv(k2, step), num_sms, 4)
        return _config("gemv", 16, step, split, 4, 3, "int")
    step = min(128, pairs)
    split = _split_for(cdiv(n, 32), cdiv(k2, step), num_sms, 4)
    return _config("dot", 32, step, split, 2, 3, "int")
