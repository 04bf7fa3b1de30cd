"""Tuning space of the W12 GEMM on fragment-order planes, as data (STYLE.md item 10).

Both kernels (``triton.py``) take tiles of ``num_warps`` warps of ``ROWS_PER_WARP`` rows (mma: 16
or 32, one or two 16-row blocks per warp; the GEMV: 16; there is no separate ``BLOCK_N``, which the
tuner would otherwise sample into invalid pairs) by ``BLOCK_K`` pairs (a multiple of the 32-pair
block that divides the weight's pair blocks per row), split K ``SPLIT_K`` ways, and decode with
``DECODE`` ("int": Triton integer ops, runs anywhere; "prmt": the inline-PTX decode, GPU only).
``mma`` takes ``BLOCK_T`` tokens per program (M above it: tiles of ``BLOCK_T``), ``MMA_V2`` (1:
``mma.sync`` also on 4+ warps, where Triton would emit ``wgmma``, whose A layout is not the
planes'), and ``num_stages`` (1: the planes go from global memory to registers; more stages copy
them through shared memory first). ``gemv`` runs M = 1 with no MMA. ``ESC_CHUNK``: escapes applied
per row in unrolled chunks of this many. ``PREFETCH`` (both): 1 loads the split's first K step's
planes before the PDL wait, under the previous kernel's tail (the rows-order GEMV always does; the
same bits either way). ``CHAINS`` (mma): independent accumulators per K step, so the step's MMAs
are that many dependency chains instead of one (1; 2: the low and high halves apart; 4: also the
step's two halves of chunks). ``ESC_EARLY`` (mma): 1 fetches each row's first ``ESC_CHUNK``
escapes before the PDL wait and their x values right after it, so the epilogue walks only rows with
more (the epilogue's walk costs two dependent loads per chunk); 2 fetches the same escapes before
the wait but gathers their x values after the K loop: one round of loads in the epilogue instead
of the walk's three (escape ranges, then columns, then x), and no registers held in the prologue;
3 (mma only) loads the rows' escape ranges before the wait and walks all their escapes right
after it, before the K loop, holding only the sums through it; 4 (mma only) adds the program's
escapes after the K loop ``32 ESC_CHUNK`` at a time by MMAs, gathering x only for escapes that
exist (``triton.escape_mma``); 8 (mma only) runs those rounds inside the K loop, one per K step
after the step's plane loads, split s taking rounds s, s + ``SPLIT_K``, ... (not yet timed).
``ESC_PARTS`` (mma, rounds of ``ESC_EARLY`` 4 and 8): 3 adds ``x * delta`` as three bf16 parts of
the fp32 product; 2 (bf16 x; float32 x keeps 3) puts the exact and the decoded weight in the
one-hot operand and x in the MMA as gathered, two MMAs and no product to split (not yet timed).
``WGMMA`` (mma; 4 or 8 warps, ``BLOCK_T`` 16 or more, ``MMA_V2`` 0): the A operand's columns
labelled in ``wgmma``'s register order, so Triton's ``wgmma`` takes the decoded planes without
moving them between lanes (``triton.py``).
``tma``: the mma kernel's tiles (no ``PREFETCH``; ``CHAINS`` 1 or 2) with the planes and x tiles
copied by the Tensor Memory Accelerator through a ``num_stages``-deep shared-memory pipeline; K a
multiple of 16. The planes' box rows are 256 bytes: with 32-byte rows (each plane's 16 rows of
32 pairs as stored) the same tiles ran 1.27-1.47x the mma kernel's time on the H200, with 256-byte
rows 0.98-1.13x (the same configs and shapes, M = 2-16, results/h200-2026-12-03-w12f-tma-*).

SWEEP holds the winners of the H200 runs of ``experiments/h200_w12_frag.py`` (the same tiles and
instruction streams, with each tile's bytes stored as one run there and as 512-byte blocks here;
results/h200-2026-12-02-w12-frag-*.json, then re-measured on this op in ...-kernels-frag.json): one
stage everywhere (three stages lost to it by up to 6% on the wide shapes,
results/h200-2026-12-02-w12-frag-one-stage.json; on this op two or three stages were 1.3-14% slower
on all 12 rows tried at M = 8 and 16, ...-2026-12-03-w12f-stages-probe.json), 2 warps x 64 pairs or
4 warps x 128 pairs on the wide projections (gate_up, lm_head), 1-2 warps x 256 pairs on the
attention and GDN input projections, and 4- or 8-way split K with 128- or 256-pair steps on the
narrow ones (down_proj, out_proj: N = 5120 leaves too few row tiles). Two choices stay out of
SWEEP, measured on its weights at the M = 8 and 16 winners' tiles: 32 rows per warp (162-255
registers; no row beat the 16-row winners, results/h200-2026-12-03-w12f-rows-per-warp-probe.json)
and ``ESC_EARLY`` 1 (0.95-1.11x the best late config per row, within the spread of back-to-back
configs: ...-w12f-esc-early-probe.json); the tuner may still pick either per shape. ``ESC_EARLY``
2 joined it on the 256-pair tiles of the input projections only (below).
"""

import itertools
from collections.abc import Iterator

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.launch import next_pow2
from specpilot.kernels.skinny_gemm.space import check_config_keys
from specpilot.kernels.skinny_gemm.space import check_launch
from specpilot.kernels.skinny_gemm.space import m_bucket
from specpilot.kernels.w12.format import FRAG_PAIRS
from specpilot.kernels.w12.format import FRAG_ROWS

__all__ = ["KEY", "PARAMS", "SWEEP", "configs", "default_config", "kernels_for", "m_bucket",
           "row_blocks", "token_tile", "validate"]

KEY = ("M_BUCKET", "N", "K")

_COMMON = {"BLOCK_K": [32, 64, 128, 256], "SPLIT_K": [1, 2, 3, 4, 6, 8], "num_warps": [1, 2, 4, 8],
           "DECODE": ["int", "prmt"], "ESC_CHUNK": [1, 2, 4, 8], "PREFETCH": [0, 1]}
PARAMS = {
    "mma": {**_COMMON, "BLOCK_T": [8, 16, 32, 64], "num_stages": [1, 2, 3], "MMA_V2": [0, 1],
            "CHAINS": [1, 2, 4], "ROWS_PER_WARP": [16, 32], "ESC_EARLY": [0, 1, 2, 3, 4, 8],
            "WGMMA": [0, 1], "ESC_PARTS": [3, 2]},
    "gemv": {**_COMMON, "num_stages": [1]},
    "tma": {**{name: v for name, v in _COMMON.items() if name != "PREFETCH"},
            "BLOCK_T": [8, 16, 32, 64], "num_stages": [2, 3, 4, 5, 6, 8], "MMA_V2": [0, 1],
            "CHAINS": [1, 2], "ROWS_PER_WARP": [16, 32], "ESC_EARLY": [0, 1, 2]},
}
ADDED_DEFAULTS = {"mma": {"PREFETCH": 0, "CHAINS": 1, "ROWS_PER_WARP": 16, "ESC_EARLY": 0,
                          "WGMMA": 0, "ESC_PARTS": 3},
                  "gemv": {"PREFETCH": 0}}
# Parameters a kernel lost, dropped from stored configs (kernels.tuning.ops.complete_config): the
# first results (results/h200-2026-12-02-kernels-frag.json, ...-w12-kernels-run2{6,7}.json) stored
# BLOCK_N, always 16 x num_warps.
REMOVED_KEYS = {"mma": ("BLOCK_N",), "gemv": ("BLOCK_N",)}
TEST_ONLY_KEYS = ("_test_corrupt", "_test_hang")
MAX_GRID_Y = 65535  # CUDA's limit on grid axis 1, which holds the row tiles
_SMEM_BUDGET = 160 * 1024
_TMA_SMEM_BUDGET = 220 * 1024  # the bf16 TMA kernel's (kernels/skinny_gemm/space.py)


def kernels_for(m: int) -> list[str]:
    """Kernel families that can run M rows."""
    return ["gemv", "mma", "tma"] if m == 1 else ["mma", "tma"]


def row_blocks(config: dict) -> int:
    """16-row blocks per program: ``num_warps`` times the blocks each warp holds (``ROWS_PER_WARP
    / 16``; the GEMV holds one)."""
    return config["num_warps"] * config.get("ROWS_PER_WARP", FRAG_ROWS) // FRAG_ROWS


def token_tile(config: dict, m: int) -> int:
    """Tokens per program: ``BLOCK_T`` for the MMA kernels, 1 for the GEMV."""
    return 1 if config["kernel"] == "gemv" else config["BLOCK_T"]


def configs() -> Iterator[dict]:
    """Every config of the space, lazily."""
    for kernel, params in PARAMS.items():
        for values in itertools.product(*params.values()):
            yield {"kernel": kernel, **dict(zip(params, values))}


def validate(config: dict, m: int, n: int, k: int) -> None:
    """Raise ValueError naming the field if ``config`` cannot run ``[m, k] x W12[n, k]^T`` on
    fragment-order planes."""
    kernel = check_config_keys(config, PARAMS, TEST_ONLY_KEYS)
    for name, choices in PARAMS[kernel].items():
        if config[name] not in choices or isinstance(config[name], bool):
            raise ValueError(f"config[{name!r}] must be one of {choices}, got {config[name]!r}")
    check_launch(config)
    if kernel not in kernels_for(m):
        raise ValueError(f"kernel {kernel!r} cannot run M={m} (allowed: {kernels_for(m)})")
    blocks = cdiv(cdiv(k, 2), FRAG_PAIRS)
    if blocks % (config["BLOCK_K"] // FRAG_PAIRS):
        raise ValueError(f"BLOCK_K={config['BLOCK_K']} pairs must be whole {FRAG_PAIRS}-pair "
                         f"blocks dividing the {blocks} blocks of a row at K={k}")
    if cdiv(cdiv(n, FRAG_ROWS), row_blocks(config)) > MAX_GRID_Y:
        raise ValueError(f"num_warps={config['num_warps']} ({FRAG_ROWS} rows each) makes more "
                         f"than {MAX_GRID_Y} row tiles at N={n}: take more warps")
    if kernel != "gemv":
        if config["CHAINS"] == 4 and config["BLOCK_K"] % (2 * FRAG_PAIRS):
            raise ValueError(f"CHAINS=4 splits each K step in two: BLOCK_K={config['BLOCK_K']} "
                             f"must be an even number of {FRAG_PAIRS}-pair blocks")
        # wgmma needs 16 tokens (WGMMA), so below M = 16 it pads to them
        if config["BLOCK_T"] > max(16 if config.get("WGMMA") else 8, next_pow2(m)):
            raise ValueError(f"BLOCK_T={config['BLOCK_T']} pads M={m} past the next power of "
                             "two: a smaller tile computes the same")
        planes = 3 + (kernel == "tma")  # the TMA box holds a fourth, zero-filled plane
        stage = (planes * FRAG_ROWS * row_blocks(config) * config["BLOCK_K"]
                 + 4 * config["BLOCK_K"] * config["BLOCK_T"])
        # the TMA pipeline holds num_stages - 1 steps (sm_90a compiles: 2 warps x 128 pairs x 8
        # tokens on 4 stages took 61496 B, 3 x 20 KB and its barriers)
        smem = (config["num_stages"] - (kernel == "tma")) * stage
        budget = _TMA_SMEM_BUDGET if kernel == "tma" else _SMEM_BUDGET
        if config["num_stages"] > 1 and smem > budget:
            raise ValueError(f"{kernel} pipeline needs {smem} B of shared memory > {budget}")
    if kernel == "mma" and config["WGMMA"]:
        if config["MMA_V2"] or config["num_warps"] % 4 or config["BLOCK_T"] < 16:
            raise ValueError("WGMMA labels the A operand for wgmma, which Triton emits on 4 or 8 "
                             "warps with 16 or more tokens and MMA_V2 0: got MMA_V2="
                             f"{config['MMA_V2']}, num_warps={config['num_warps']}, "
                             f"BLOCK_T={config['BLOCK_T']}")
    if kernel == "mma" and config["ESC_PARTS"] != 3 and config["ESC_EARLY"] not in (4, 8):
        raise ValueError(f"ESC_PARTS={config['ESC_PARTS']} changes the one-hot escape rounds, "
                         f"which ESC_EARLY 4 and 8 run: got ESC_EARLY={config['ESC_EARLY']}")
    if kernel == "tma" and k % 16:
        raise ValueError(f"the tma kernel copies x's two halves as 16-byte rows: K={k} must be "
                         "a multiple of 16")


def _mma(warps: int, block_k: int, block_t: int, split_k: int = 1, mma_v2: int = 0,
         decode: str = "prmt", prefetch: int = 0, rows_per_warp: int = FRAG_ROWS,
         esc_early: int = 0, esc_chunk: int = 1, wgmma: int = 0) -> dict:
    return {"kernel": "mma", "BLOCK_K": block_k, "SPLIT_K": split_k, "num_warps": warps,
            "DECODE": decode, "ESC_CHUNK": esc_chunk, "PREFETCH": prefetch, "BLOCK_T": block_t,
            "num_stages": 1, "MMA_V2": mma_v2, "CHAINS": 1, "ROWS_PER_WARP": rows_per_warp,
            "ESC_EARLY": esc_early, "WGMMA": wgmma, "ESC_PARTS": 3}


def _tma(warps: int, block_k: int, block_t: int, num_stages: int, split_k: int = 1,
         mma_v2: int = 1, chains: int = 2, rows_per_warp: int = FRAG_ROWS, esc_early: int = 0,
         esc_chunk: int = 1, decode: str = "prmt") -> dict:
    return {"kernel": "tma", "BLOCK_K": block_k, "SPLIT_K": split_k, "num_warps": warps,
            "DECODE": decode, "ESC_CHUNK": esc_chunk, "BLOCK_T": block_t,
            "num_stages": num_stages, "MMA_V2": mma_v2, "CHAINS": chains,
            "ROWS_PER_WARP": rows_per_warp, "ESC_EARLY": esc_early}


def _gemv(warps: int, block_k: int, split_k: int = 1, decode: str = "prmt",
          prefetch: int = 0) -> dict:
    return {"kernel": "gemv", "BLOCK_K": block_k, "SPLIT_K": split_k, "num_warps": warps,
            "DECODE": decode, "ESC_CHUNK": 1, "PREFETCH": prefetch, "num_stages": 1}


# The first K step's planes loaded before the PDL wait (PREFETCH) on the tiles that won a row at
# M <= 16 (results/h200-2026-12-02-kernels-frag.json), and split K for the narrow projections on
# 1-warp tiles: within -6%..+3% of the same tiles without it, mostly faster (4-5% at M = 16), and
# the fragment-order winner on 33 of the 40 rows (results/h200-2026-12-02-kernels-prefetch.json).
_PREFETCHED = [
    _mma(2, 64, 8, prefetch=1), _mma(4, 128, 8, mma_v2=1, prefetch=1), _mma(1, 256, 8, prefetch=1),
    _mma(2, 256, 8, prefetch=1), _mma(2, 128, 8, 4, prefetch=1), _mma(1, 128, 8, 4, prefetch=1),
    _mma(2, 128, 16, 4, prefetch=1), _mma(2, 256, 16, prefetch=1),
    _mma(4, 128, 16, mma_v2=1, prefetch=1), _mma(4, 128, 16, 2, mma_v2=1, prefetch=1),
    _mma(1, 256, 8, 2, prefetch=1), _mma(1, 128, 8, 8, prefetch=1), _mma(1, 256, 8, 4, prefetch=1),
]
SWEEP = [
    _gemv(4, 128), _gemv(1, 128), _gemv(2, 128, 4),
    # The GEMV with PREFETCH: level on 1 warp, 1.1-1.9x slower on 2 and 4 warps (kernels-prefetch).
    _gemv(1, 128, prefetch=1),
    *_PREFETCHED,
    # Two independent accumulator chains per K step (CHAINS 2): a median 1.4% faster than the
    # same tile with one (0.80-1.00x), the fragment-order winner on 22 of the 40 rows; four chains
    # were a median 6% slower (results/h200-2026-12-02-kernels-chains.json): not in the sweep.
    *[{**config, "CHAINS": 2} for config in _PREFETCHED],
    # 16-token tiles split 8 ways on the narrow projections: mg_down M = 16 55.2 us, gdn_out 19.6,
    # against 59.4 and 20.8 split 4 (results/h200-2026-12-03-w12f-max-regs-probe.json)
    _mma(2, 128, 16, 8, prefetch=1),
    # 2-warp 256-pair steps split 8 ways: q3_down M = 8 36.5 us and M = 16 42.0 against 38.9 and
    # 43.9 for the sweep's best tiles in the same run, mg_down level (51.7 vs 51.8)
    # (results/h200-2026-12-03-w12f-stages-probe.json, one stage)
    _mma(2, 256, 8, 8, prefetch=1), _mma(2, 256, 16, 8, prefetch=1),
    # ESC_EARLY 2 with chunks of 4 on the two-chain 256-pair tiles of the attention and GDN input
    # projections: 1.3-2.7% faster than the late walk on all 8 rows at M = 1-8 (qkvg M = 8 29.6
    # vs 30.1 us); on split-K and 64-pair tiles level or up to 7% slower, so not there
    # (results/h200-2026-12-03-w12f-esc-early2-probe.json, timed after the 20 ms warm-up)
    *[{**_mma(w, 256, 8, prefetch=1), "CHAINS": 2, "ESC_EARLY": 2, "ESC_CHUNK": 4}
      for w in (1, 2)],
    # ESC_EARLY 3 (split 0's whole escape walk before the K loop) with chunks of 4 on the 2-warp
    # 256-pair split-8 tile: gdn_out M = 4 15.9 us and M = 8 16.2 against 16.1 and 16.9 for the
    # best late walk in the same run; level at M = 2, and no gain on q3_down (36.7 vs 36.7 us at
    # M = 4). Escape-free weights run the same rows in 14.5-14.7 us
    # (results/h200-2026-12-03-w12f-esc-first-probe.json)
    {**_mma(2, 256, 8, 8, prefetch=1), "ESC_EARLY": 3, "ESC_CHUNK": 4},
    # ESC_EARLY 4 (the program's escapes added after the K loop by one-hot MMAs, x gathered only
    # for escapes that exist) on the M = 16 winners' tiles: at M = 16 the escape walk cost the
    # winners 1.0-11.1 us over the same planes without escapes (gate_up 73.0 vs 65.6 us), 0.2-3.0
    # at M = 2-8 (results/h200-2026-12-04-w12-escape-cost.json); ESC_EARLY 4 took qkvg 33.2 ->
    # 31.4 us, gdn_in 36.4 -> 34.7, gate_up 72.8 -> 70.1, gdn_out 19.4 -> 18.8, mg_down level,
    # and mg_gate_up (split 1: 128 registers instead of 95, so 4 programs per SM instead of 5 and
    # its 624 programs spill into a second wave) 103.3 -> 127.4
    # (results/h200-2026-12-04-w12f-esc-mma.json)
    *[{**config, "ESC_EARLY": 4} for config in (
        {**_mma(2, 256, 16, prefetch=1), "CHAINS": 2},
        {**_mma(2, 256, 16, prefetch=1, esc_chunk=2), "CHAINS": 2},
        _mma(4, 128, 16, 2, mma_v2=1, prefetch=1), _mma(2, 256, 16, 8, prefetch=1),
        _mma(2, 128, 16, 8, prefetch=1))],
    # Split K 3 and 6 with ESC_EARLY 4 on the narrow projections' winners' tiles (the split-8
    # tiles leave 1.8 waves of programs on gdn_out): gdn_out M = 4 15.78 us (split 8 with the
    # walk: 16.96), M = 8 16.46 (17.41), M = 16 18.40 (19.58), q3_down M = 16 41.07 (42.54); the
    # same splits with the walk were level or slower, and mg_down gained nothing
    # (results/h200-2026-12-04-w12f-split-probe.json)
    {**_mma(1, 128, 8, 6, prefetch=1), "CHAINS": 2, "ESC_EARLY": 4},
    {**_mma(2, 256, 8, 3, prefetch=1), "ESC_EARLY": 4},
    *[{**_mma(2, 256, 16, split, prefetch=1), "ESC_EARLY": 4} for split in (3, 6)],
    # M = 32 and 64: the M = 16 winners on wider token tiles (the table's winners at M = 32 and 64
    # were still the 16-token tiles, results/h200-2026-12-03-kernels-m32-64.json)
    _mma(2, 128, 32, 4), _mma(2, 256, 32), _mma(4, 128, 32, mma_v2=1), _mma(2, 128, 64, 2),
    # wgmma with the decoded planes in registers (WGMMA, 4 warps, PREFETCH): the fastest config
    # on all 7 rows at M = 32, 5-17% ahead of the mma.sync and TMA tiles (q3_gate_up 100.6 vs
    # 107.5 us, mg_down 69.8 vs 84.2), and on the narrow rows at M = 16 by 1-4% (q3_down 41.1 vs
    # 42.8); level or behind on the wide rows at M = 16 (results/h200-2026-12-04-w12f-wgmma-probe
    # .json)
    *[_mma(4, block_k, block_t, split_k, prefetch=1, wgmma=1) for block_k, block_t, split_k in (
        (256, 32, 1), (128, 32, 2), (256, 32, 2), (256, 32, 8), (64, 16, 8), (128, 16, 8),
        (256, 16, 8))],
    # The TMA kernel (planes in 256-byte box rows), beside the same run's mma winners
    # (results/h200-2026-12-03-w12f-tma-probe.json): 7-13% slower at M = 2-16 except gate_up
    # M = 16 (79.5 vs 81.5 us, 2 warps x 128 pairs, 4 stages); at M = 64 2-10% faster on every
    # Qwen shape tried (qkvg 80.1 vs 85.3 us, q3_down 93.3 vs 104.1, gdn_out 40.5 vs 45.1), and
    # gate_up M = 32 105.1 vs 117.6, on 32-token tiles with no spilled register (159-212)
    _tma(2, 128, 16, 4), _tma(2, 64, 32, 3, rows_per_warp=32), _tma(2, 128, 32, 3),
    _tma(4, 64, 32, 4), _tma(2, 128, 32, 3, 2), _tma(4, 128, 32, 3, 4),
]


def default_config(m: int, n: int, k: int, num_sms: int = 132) -> dict:
    """The untuned choice (logged by the launcher when used), after the measured winners: all 38
    W12 rows at M = 1-16 of results/h200-2026-12-03-kernels-m1-16-one-start.json won on the MMA
    kernel with one stage, PREFETCH and the prmt decode, 29 of them on 2 warps, 24 with 256 pairs
    a K step, split K 8 on the narrow projections (160-208 row tiles) and 1 on the wide ones (448
    row tiles and more), 8-token tiles to M = 8 and 16-token tiles at 16. So: 2 warps (more where
    N has too many row tiles for the grid) x the largest of 256 / 128 / 64 / 32 pairs that
    divides a row's blocks, tiles of the next power of two of M from 8 to 64 tokens, split K 8
    (at most one split per K step) while the row tiles do not fill twice the SMs. On 16- and
    32-token tiles the escapes are added by MMAs in rounds of 64 (``ESC_EARLY`` 4, ``ESC_CHUNK``
    2): on this default config 0.947-1.010x the walk's time at M = 16 (six of eight decode
    shapes faster, q3_down and mg_down level) and 0.835-0.939x at M = 32 (all eight; qkvg 63.2 ->
    52.8 us), results/h200-2026-12-04-w12f-default-esc-mma.json; 8-token tiles keep the walk (it
    costs little there), 64-token tiles were not measured.

    The prmt decode (inline PTX) is the default on a GPU: the integer decode in the same config
    takes 1.33-1.61x its time, which puts W12 behind bf16, and token forcing on the deployment's
    GPU gates every engine whatever its kernels decode with. Under the interpreter the integer
    decode (it cannot run PTX). The defaults before 2026-12-04 (integer decode, no PREFETCH, 64
    pairs, the GEMV at M = 1) took 1.26-1.95x the time of these on 24 decode rows
    (results/h200-2026-12-04-w12f-default.json)."""
    blocks = cdiv(cdiv(k, 2), FRAG_PAIRS)
    block_k = next(bk for bk in (256, 128, 64, 32) if blocks % (bk // FRAG_PAIRS) == 0)
    warps = 2
    while warps < 8 and cdiv(cdiv(n, FRAG_ROWS), warps) > MAX_GRID_Y:
        warps *= 2
    tiles, steps = cdiv(n, warps * FRAG_ROWS), blocks // (block_k // FRAG_PAIRS)
    split = 1
    while split < 8 and tiles < 2 * num_sms and 2 * split <= steps:
        split *= 2
    decode = "int" if interpreting() else "prmt"
    block_t = min(64, max(8, next_pow2(m)))
    esc = {"esc_early": 4, "esc_chunk": 2} if 16 <= block_t <= 32 else {}
    return _mma(warps, block_k, block_t, split, decode=decode, prefetch=1, **esc)