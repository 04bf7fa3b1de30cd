"""Tuning space of the skinny bf16 GEMM, as data (STYLE.md item 10).

A config is a dict: ``kernel`` ("gemv": CUDA-core GEMV, M <= 2, each weight loaded once and
multiplied by both rows (on the H200 it beat the swap-AB kernel at M = 2 on 4 of 8 decode shapes
and tied on a fifth, results/h200-2026-12-01-kernels-m2-4-gemv-rows.json; for 4 rows it lost on
all 8, by 1.2-1.4x, so it stops at 2); "gemv_sk": the M == 1
GEMV under a stream-K schedule, ``PROGRAMS_PER_SM`` programs per SM sharing the K steps, ``PDL`` 1
for a programmatic dependent launch, ``MAX_REGS`` a register cap per thread, 0 for none
(:mod:`specpilot.kernels.common.streamk`); "dot": swap-AB tensor-core
tiles, weights [BLOCK_N, BLOCK_K] as the MMA M side and the M tokens padded to BLOCK_T >= 16 as the
N side); "tma": the same swap-AB tiles with every K step's weight and x tiles copied by the Tensor
Memory Accelerator, K a multiple of 8 (16-byte rows); "dot_sk": the swap-AB kernel under the
stream-K schedule, M <= 64 (one token tile),
``PROGRAMS_PER_SM`` as for "gemv_sk"; "tma_sk": the tma tiles under that schedule, the
program's K steps one flat loop, so the copies run on across tile boundaries), block sizes,
``SPLIT_K`` (deterministic split-K),
``K_STAGES`` (GEMV: its K loop software-pipelined through shared memory, that many steps in
flight; 1 for none), ``num_warps``,
``num_stages``, ``PREFETCH`` (dot: 1 loads the first K step's weight tile before the PDL wait),
``L2_PREFETCH`` (gemv, dot: the weights of that many K steps after the first requested into L2
before the PDL wait, :mod:`specpilot.kernels.common.prefetch`; 0 for none; GPU only; no gain
on the H200, so in no SWEEP entry), ``MMA_V2`` (dot, dot_sk: 1 compiles the tile to ``mma.sync``
where Triton would pick ``wgmma``, 4+ warps on sm_90: :mod:`specpilot.kernels.common.mma`),
``BLOCK_T_MIN`` (dot, dot_sk: the token tile BLOCK_T is M padded to a power of two, at least
this; Triton's ``tl.dot`` takes N below 16, so 8 or 4 tokens at M <= 8 halve or quarter the x
tiles in shared memory and the MMAs of the 16-token tile). BLOCK_T is derived from M (and
``BLOCK_T_MIN``), never tuned itself. Tuned configs are cached per ``KEY`` = (M bucket, N, K) and
environment.
"""

import itertools
from collections.abc import Iterator

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.launch import next_pow2

KEY = ("M_BUCKET", "N", "K")
L2_STEPS = [0, 1, 2, 4, 8, 16, 64]  # L2_PREFETCH choices: K steps after the first

# The TMA kernels' tiles (both families; each adds how it splits the work).
_TMA_TILES = {
    "BLOCK_N": [16, 32, 64, 128, 256],
    "BLOCK_K": [32, 64, 128, 256],
    "num_warps": [1, 2, 4, 8],
    "num_stages": [2, 3, 4, 5, 6, 7, 8, 10],
    "MMA_V2": [0, 1],
    "BLOCK_T_MIN": [16, 8],
}

PARAMS = {
    "gemv": {
        "BLOCK_N": [4, 8, 16, 32, 64],
        "BLOCK_K": [128, 256, 512, 1024],
        "SPLIT_K": [1, 2, 4, 8],
        "num_warps": [2, 4, 8],
        "num_stages": [1, 2, 3, 4],
        "K_STAGES": [1, 2, 3, 4],
        "L2_PREFETCH": L2_STEPS,
    },
    "gemv_sk": {
        "BLOCK_N": [8, 16, 32],
        "BLOCK_K": [128, 256, 512, 1024],
        "PROGRAMS_PER_SM": [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 18],
        "MAX_REGS": [0, 48, 56, 64, 96],
        "num_warps": [2, 4, 8],
        "num_stages": [1],  # its loops hold no tl.dot and are not pipelined
        "PDL": [0, 1],
    },
    "dot": {
        "BLOCK_N": [16, 32, 64, 128, 256],
        "BLOCK_K": [32, 64, 128, 256, 512],
        "SPLIT_K": [1, 2, 4, 8],
        "num_warps": [1, 2, 4, 8],
        "num_stages": [2, 3, 4, 5],
        "PREFETCH": [0, 1],
        "L2_PREFETCH": L2_STEPS,
        "MMA_V2": [0, 1],
        "BLOCK_T_MIN": [16, 8, 4],
    },
    "tma": {**_TMA_TILES, "SPLIT_K": [1, 2, 4, 8]},
    "tma_sk": {**_TMA_TILES, "PROGRAMS_PER_SM": [1, 2, 3, 4]},  # the same tiles, stream-K
    "dot_sk": {
        "BLOCK_N": [32, 64, 128],
        "BLOCK_K": [32, 64, 128, 256],
        "PROGRAMS_PER_SM": [1, 2, 3, 4, 5, 6, 8],
        "MAX_REGS": [0],
        "num_warps": [4, 8],
        "num_stages": [2, 3, 4, 5],
        "PDL": [0, 1],
        "MMA_V2": [0, 1],
        "BLOCK_T_MIN": [16, 8, 4],
    },
}


def configs() -> Iterator[dict]:
    """Every config of the space, lazily (the product runs to hundreds of thousands)."""
    for kernel, params in PARAMS.items():
        for values in itertools.product(*params.values()):
            yield {"kernel": kernel, **dict(zip(params, values))}


# A handful of starting points (the REFERENCE-kernels.md §3.1 prototype's winners on H200): the
# H200 script's short sweep and the tuner's first trials.


def _config(kernel: str, block_n: int, block_k: int, split_k: int, num_warps: int,
            num_stages: int, k_stages: int = 1, prefetch: int = 0, l2: int = 0,
            mma_v2: int = 0, t_min: int = 16) -> dict:
    config = {"kernel": kernel, "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k,
              "num_warps": num_warps, "num_stages": num_stages, "L2_PREFETCH": l2}
    return ({**config, "K_STAGES": k_stages} if kernel == "gemv"
            else {**config, "PREFETCH": prefetch, "MMA_V2": mma_v2, "BLOCK_T_MIN": t_min})


def _tma(block_n: int, block_k: int, split_k: int, num_warps: int, num_stages: int,
         mma_v2: int = 0, t_min: int = 16) -> dict:
    return {"kernel": "tma", "BLOCK_N": block_n, "BLOCK_K": block_k, "SPLIT_K": split_k,
            "num_warps": num_warps, "num_stages": num_stages, "MMA_V2": mma_v2,
            "BLOCK_T_MIN": t_min}


SWEEP = [
    _config("gemv", 8, 512, 1, 4, 3),
    _config("gemv", 16, 256, 1, 4, 3),
    _config("gemv", 16, 512, 2, 4, 3),
    _config("gemv", 16, 256, 4, 4, 3),
    # The K loop software-pipelined (cp.async into shared memory).
    _config("gemv", 8, 512, 1, 4, 3, k_stages=3),
    _config("gemv", 16, 256, 1, 4, 3, k_stages=3),
    _config("gemv", 8, 256, 1, 4, 3, k_stages=4),
    # Fewer rows per program, the shape that helped the W12 GEMV
    # (results/h200-2026-11-30-w12-anatomy.json), measured here too so the comparison stays fair.
    _config("gemv", 4, 1024, 1, 2, 3),
    _config("gemv", 4, 512, 1, 2, 3, k_stages=3),
    _config("dot", 64, 128, 1, 4, 4),
    _config("dot", 128, 128, 1, 4, 3),
    _config("dot", 64, 256, 1, 4, 3),
    _config("dot", 128, 128, 4, 4, 3),
    _config("dot", 128, 128, 2, 8, 3),
    # The first K step's weight tile loaded before the PDL wait (the M = 1 GEMV always does; a
    # tl.dot loop's pipeline prologue issues after it either way), measured against the above.
    _config("dot", 64, 128, 1, 4, 4, prefetch=1),
    _config("dot", 128, 128, 1, 4, 3, prefetch=1),
    # The GEMV for 2 rows (the entries above run there too where their tile fits): a smaller
    # tile, since the second row adds a [BLOCK_N, BLOCK_K] fp32 partial product. With 8 x 256 and
    # 16 x 256 it won M = 2 on 4 of 8 H200 decode shapes
    # (results/h200-2026-12-01-kernels-m2-4-gemv-rows.json).
    _config("gemv", 4, 256, 1, 2, 3, k_stages=3),
    # The H200 grid around the swap-AB kernel where cuBLAS won (results/h200-2026-12-01-bf16-probe
    # .json, 4 stages): split K and 64-wide K steps at M = 2-16, 128 x 64 on 8 warps at M = 64.
    _config("dot", 64, 64, 4, 4, 4),
    _config("dot", 64, 128, 2, 4, 4),
    _config("dot", 64, 64, 1, 4, 4),
    _config("dot", 128, 128, 2, 8, 4),
    _config("dot", 128, 64, 4, 8, 4),
    # The swap-AB kernel under stream-K at about the programs per SM its shared memory allows:
    # Nsight Compute on the H200 had this kernel's SMs busy 89% of the time at M = 16 on gate_up
    # (results/h200-2026-12-01-w12-ncu.json), where cuBLAS was 2% faster. It won gate_up
    # at M = 4-16, still 1-3% behind cuBLAS (results/h200-2026-12-02-kernels-dot-sk.json).
    {"kernel": "dot_sk", "BLOCK_N": 64, "BLOCK_K": 128, "PROGRAMS_PER_SM": 2, "MAX_REGS": 0,
     "num_warps": 4, "num_stages": 4, "PDL": 0, "MMA_V2": 0,
     "BLOCK_T_MIN": 16},
    {"kernel": "dot_sk", "BLOCK_N": 64, "BLOCK_K": 64, "PROGRAMS_PER_SM": 5, "MAX_REGS": 0,
     "num_warps": 4, "num_stages": 4, "PDL": 0, "MMA_V2": 0,
     "BLOCK_T_MIN": 16},
    # No tma_sk entry: the TMA tiles under stream-K lost every H200 row they ran at M = 16-64,
    # by 0.5-24% (results/h200-2026-12-03-tma-sk-probe.json; kernels/common/streamk.py).
    # The swap-AB kernel on mma.sync instead of wgmma (kernels/common/mma.py): the winners of an
    # H200 probe over 64 x 4 and 128 x 8 tiles, K steps 64-256, 3-4 stages at M = 4-16
    # (results/h200-2026-12-02-mma-v2-probe-bf16.json).
    _config("dot", 64, 64, 1, 4, 3, mma_v2=1),
    _config("dot", 64, 128, 1, 4, 3, mma_v2=1),
    _config("dot", 64, 256, 1, 4, 4, mma_v2=1),
    _config("dot", 128, 128, 1, 8, 4, mma_v2=1),
    # In the first sweep with them (results/h200-2026-12-02-kernels-mma-v2.json) mma.sync tiles
    # won 20 of the 30 swap-AB rows at M = 2-16; cuBLAS still won gdn_out (N = 5120: 80 tiles of
    # 64 rows for 132 SMs) at M = 4-16 by 1-3%. Split K on mma.sync: of 64 x 128 and 64 x 256
    # with 2 splits, 64 x 64 with 4, 64 x 64 and 128 x 64 unsplit, and stream-K 64 x 128, only
    # this one won a row (down_proj at M = 32), and none gdn_out
    # (results/h200-2026-12-02-kernels-mma-v2-splitk.json).
    _config("dot", 64, 64, 4, 4, 4, mma_v2=1),
    # The token tile of 8 for M <= 8 (BLOCK_T_MIN; refused at M >= 16) on the M = 4-8 winners:
    # half the x tiles and MMAs of the 16-token tile. They won 19 of the 30 swap-AB rows at
    # M = 2-8, within -3%..+4% of the previous winners' times on another machine start: no gain
    # above that noise (results/h200-2026-12-02-kernels-t-min.json).
    _config("dot", 64, 64, 1, 4, 3, mma_v2=1, t_min=8),
    _config("dot", 128, 128, 1, 8, 4, mma_v2=1, t_min=8),
    _config("dot", 64, 256, 1, 4, 4, mma_v2=1, t_min=8),
    _config("dot", 64, 128, 1, 4, 4, t_min=8),
    _config("dot", 64, 64, 4, 4, 4, t_min=8),
    # The swap-AB tiles on TMA copies (one bulk copy per tile and K step, no per-thread address
    # math or masks), around the dot winners, deeper pipelines (TMA needs no registers for the
    # copies in flight) and split K for the short-N shapes. In the first H200 sweeps with them
    # (results/h200-2026-12-02-kernels-tma*.json) they won 15-19 of 40 rows at M <= 16, mostly
    # ties with the dot kernel but 5% ahead on gdn_out at M = 16, so Triton was no slower than
    # cuBLAS on 40/40 (37/40 before); at M = 32-64 they won 13-14 of 16 rows, up to 11% ahead,
    # and Triton matched cuBLAS on 14/16 (7/16 before).
    _tma(64, 128, 1, 4, 4),
    _tma(64, 128, 1, 4, 6),
    _tma(64, 256, 1, 4, 4),
    _tma(128, 128, 1, 4, 4),
    _tma(128, 128, 1, 8, 4),
    _tma(64, 64, 1, 4, 6),
    _tma(64, 128, 2, 4, 4),
    _tma(64, 128, 4, 4, 4),
    _tma(64, 128, 1, 4, 4, mma_v2=1),
    _tma(64, 256, 1, 4, 4, mma_v2=1, t_min=8),
    _tma(128, 128, 2, 8, 4),
    # The winner of an H200 probe at M = 64 over 64-256 x 4-8 tiles, K steps 64-128, 3-5 stages,
    # 1-2 splits where cuBLAS won (results/h200-2026-12-02-tma-probe-m64.json): 5 stages.
    _tma(64, 128, 1, 4, 5),
    # Deeper pipelines, up to 220 KB of shared memory: the winners of an H200 probe over 64 x 4,
    # 128 x 4 and 128 x 8 tiles, K steps 64 and 128, 4-10 stages on the large projections at
    # M = 4-64 (results/h200-2026-12-03-tma-deep-probe.json): 2-5% on q3_gate_up at M = 32-64
    # and q3_down at M = 32, level elsewhere.
    _tma(64, 128, 1, 4, 8),
    _tma(64, 64, 1, 4, 7),
    _tma(64, 64, 1, 4, 10),
    # 32-row tiles (gdn_out: 160 programs for 132 SMs, not 80) and split K 2 with 5-6 stages, for
    # the two M = 64 rows where cuBLAS still won, lost every M = 32-64 row they ran, 32-row tiles
    # by 1.1-2.1x (results/h200-2026-12-02-kernels-m64-probe.json): not in the sweep.
    # One-warp tiles of 32 and 16 rows at M = 4-16 (160-320 programs on the down projections
    # instead of 80-104; mma.sync, a warpgroup's wgmma needs 4 warps): on q3_down the fastest of
    # an H200 probe over 16-64 x 1-4 tiles, K steps 128-512, 3-6 stages, 4-10% ahead of the
    # 64 x 4 tiles; on mg_down level with them (results/h200-2026-12-02-one-warp-probe-*.json).
    _tma(32, 256, 1, 1, 4),
    _tma(32, 128, 1, 1, 6),
    _tma(16, 128, 1, 1, 6),
    _config("dot", 32, 512, 1, 1, 3, mma_v2=1),
    # With the 8-token tile at M = 2-8 (a second probe, results/h200-2026-12-02-one-warp-probe-t8
    # .json): 43.0-43.4 us on q3_down against 44.6-44.7 for the best 64 x 4 tile.
    _tma(32, 256, 1, 1, 4, t_min=8),
    _tma(16, 256, 1, 1, 4, t_min=8),
    # One stream-K GEMV (every program streams the same number of K steps), so every sweep
    # re-measures it; slower than the grid GEMV on every H200 shape in runs 6-8
    # (results/h200-2026-11-30-w12-kernels-run{6,7,8}.json).
    {"kernel": "gemv_sk", "BLOCK_N": 16, "BLOCK_K": 256, "PROGRAMS_PER_SM": 5, "MAX_REGS": 0,
     "num_warps": 4, "num_stages": 1, "PDL": 0},
]

# Parameters a kernel gained after configs were stored, with the value that runs it as before
# (the tuned cache and committed results complete older configs with these:
# kernels.tuning.ops.complete_config).
ADDED_DEFAULTS = {"gemv": {"K_STAGES": 1, "L2_PREFETCH": 0},
                  "dot": {"PREFETCH": 0, "L2_PREFETCH": 0, "MMA_V2": 0, "BLOCK_T_MIN": 16},
                  "dot_sk": {"MMA_V2": 0, "BLOCK_T_MIN": 16}}

TEST_ONLY_KEYS = ("_test_corrupt", "_test_hang", "_test_programs")
_SMEM_BUDGET = 160 * 1024
# The TMA kernels run on sm_90+ only, whose blocks may opt in to 227 KB of shared memory (H100,
# H200, B200): their pipelines may use most of it (the rest: barriers, the epilogue's scratch).
_TMA_SMEM_BUDGET = 220 * 1024


def m_bucket(m: int) -> int:
    """Shape bucket of M: the next power of two up to 64, then multiples of 64."""
    return next_pow2(m) if m <= 64 else cdiv(m, 64) * 64


def block_t(m: int, least: int = 16) -> int:
    """Token tile of the swap-AB kernel: M padded to a power of two in [least, 64]."""
    return max(least, min(64, next_pow2(m)))


def token_tile(config: dict, m: int) -> int:
    """The swap-AB kernel's token tile for ``config`` at M: :func:`block_t` with the config's
    ``BLOCK_T_MIN`` (16 for configs from before it)."""
    return block_t(m, config.get("BLOCK_T_MIN", 16))


def check_t_min(config: dict, m: int) -> None:
    """``BLOCK_T_MIN`` below 16 pads only M below 16: elsewhere the config would repeat its 16
    twin, so it is refused (the sweep skips it, as it skips a ``BLOCK_T`` that splits no M)."""
    if config["BLOCK_T_MIN"] < 16 <= next_pow2(m):
        raise ValueError(f"BLOCK_T_MIN={config['BLOCK_T_MIN']} pads only M below 16, not M={m}: "
                         "16 says that")


GEMV_MAX_M = 2  # the GEMV takes up to this many rows (each weight loaded once for both)


def gemv_rows(m: int) -> int:
    """The GEMV's row tile at M: M padded to a power of two (1 for decode)."""
    return next_pow2(m)


def kernels_for(m: int) -> list[str]:
    """Kernel families that can run M rows (``dot_sk``, ``tma_sk``: one token tile, M <= 64)."""
    one_tile = ["dot_sk", "tma_sk"] if m <= 64 else []
    if m == 1:
        return ["gemv", "gemv_sk", "dot", "tma", *one_tile]
    return (["gemv", "dot", "tma", *one_tile] if m <= GEMV_MAX_M
            else ["dot", "tma", *one_tile])


def check_config_keys(config: dict, params: dict, test_only: tuple = ()) -> str:
    """The config's kernel family, after checking it is a dict naming a family of ``params``
    (a space's ``PARAMS``) with exactly that family's keys (plus ``test_only`` ones)."""
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict, got {type(config).__name__}")  # noqa: TRY004
    kernel = config.get("kernel")
    if kernel not in params:
        raise ValueError(f"config['kernel'] must be one of {sorted(params)}, got {kernel!r}")
    expected = set(params[kernel]) | {"kernel"}
    unknown = set(config) - expected - set(test_only)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)} for kernel {kernel!r}")
    missing = expected - set(config)
    if missing:
        raise ValueError(f"config misses {sorted(missing)} for kernel {kernel!r}")
    return kernel


def validate(config: dict, m: int, n: int, k: int) -> None:
    """Raise ValueError naming the field if ``config`` cannot run ``[m, k] x [n, k]^T``."""
    kernel = check_config_keys(config, PARAMS, TEST_ONLY_KEYS)
    for name, choices in PARAMS[kernel].items():
        check_param(name, config[name], choices)
    check_launch(config)
    if kernel not in kernels_for(m):
        raise ValueError(f"kernel {kernel!r} cannot run M={m} (allowed: {kernels_for(m)})")
    if kernel in ("gemv", "gemv_sk"):
        check_gemv_tile(config, m)
    else:
        if config["BLOCK_N"] < 16 or config["BLOCK_K"] < 16:
            raise ValueError("dot needs BLOCK_N >= 16 and BLOCK_K >= 16 (tl.dot minimum)")
        check_t_min(config, m)
        if kernel in ("tma", "tma_sk") and k % 8:
            raise ValueError(f"the tma kernel needs K a multiple of 8 (16-byte rows), got K={k}")
        smem = (config["num_stages"] * (config["BLOCK_N"] + token_tile(config, m))
                * config["BLOCK_K"] * 2)
        budget = _TMA_SMEM_BUDGET if kernel in ("tma", "tma_sk") else _SMEM_BUDGET
        if smem > budget:
            raise ValueError(f"{kernel} pipeline needs {smem} B of shared memory > {budget}")


def check_gemv_tile(config: dict, m: int) -> None:
    """The GEMV's fp32 partial products, ``gemv_rows(M) * BLOCK_N * BLOCK_K`` over the threads,
    must fit 64 registers per thread."""
    rows = gemv_rows(m) if config["kernel"] == "gemv" else 1
    per_thread = rows * config["BLOCK_N"] * config["BLOCK_K"] // (32 * config["num_warps"])
    if per_thread > 64:
        raise ValueError(f"gemv tile rows*BLOCK_N*BLOCK_K/threads = {per_thread} > 64 registers "
                         f"(M={m}: {rows} rows)")


# Parameters whose value must be one of their listed choices (0 means "off", for BLOCK_T "M
# decides").
CHOICE_KEYS = ("DECODE", "PDL", "MAX_REGS", "ESC_EARLY", "PREFETCH", "L2_PREFETCH", "BLOCK_T",
               "MMA_V2", "BLOCK_T_MIN")


def check_param(name: str, value, choices: list) -> None:
    """A listed choice for :data:`CHOICE_KEYS`, else :func:`check_int`."""
    if name in CHOICE_KEYS:
        if value not in choices or isinstance(value, bool):
            raise ValueError(f"config[{name!r}] must be one of {choices}, got {value!r}")
    else:
        check_int(name, value)


# Choices that are PTX, which the Triton interpreter cannot run: parameter -> (is the choice PTX,
# what it is). The launchers' validation rejects them there and the tuner never proposes them.
PTX_ONLY = {
    "DECODE": (lambda c: c.startswith("prmt"), "DECODE='prmt...' is inline PTX"),
    "PDL": (bool, "PDL=1 is a programmatic dependent launch (griddepcontrol PTX)"),
    "L2_PREFETCH": (bool, "L2_PREFETCH > 0 is inline PTX (cp.async.bulk.prefetch)"),
}


def check_launch(config: dict) -> None:
    """Choices this backend cannot run: :data:`PTX_ONLY` under the Triton interpreter."""
    if not interpreting():
        return
    for name, (is_ptx, what) in PTX_ONLY.items():
        if name in config and is_ptx(config[name]):
            raise ValueError(f"{what}, which the Triton interpreter cannot run")


def check_int(name: str, value) -> None:
    """Block sizes and warps are powers of two; SPLIT_K and num_stages any positive integer."""
    pow2 = name.startswith("BLOCK_") or name == "num_warps"
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or (
            pow2 and value & (value - 1)):
        kind = "a positive power of two" if pow2 else "a positive integer"
        raise ValueError(f"config[{name!r}] must be {kind}, got {value!r}")


def _split_for(num_tiles: int, k_iters: int, num_sms: int, ctas_per_sm: int) -> int:
    split = 1
    while split < 8 and num_tiles * split < ctas_per_sm * num_sms and k_iters // (split * 2) >= 4:
        split *= 2
    return split


def default_config(m: int, n: int, k: int, num_sms: int = 132) -> dict:
    """The untuned choice: split K until there are ~4 (gemv) or ~2 (dot) CTAs per SM.

    Logged by the launcher whenever it is used (``specpilot.kernels`` logger).
    """
    if m == 1:
        bk = 512 if k >= 4096 else 256
        split = _split_for(cdiv(n, 16), cdiv(k, bk), num_sms, 4)
        return _config("gemv", 16, bk, split, 4, 3)
    bn = 128 if n >= 128 * num_sms else 64
    split = _split_for(cdiv(n, bn), cdiv(k, 128), num_sms, 2)
    return _config("dot", bn, 128, split, 4, 3)
