"""H200: where the W12 GEMMs stall, by Nsight Compute, next to the bf16 Triton GEMM.

Run under ``ncu`` with ``--profile-from-start off``: each case is compiled and warmed up outside
the profiled range, then launched once between ``cudaProfilerStart`` and ``cudaProfilerStop``, so
ncu sees exactly one kernel launch per case, in the order of ``CASES``::

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python3 experiments/h200_w12_ncu.py [--cases NAME,..]

Each case: a named decode shape (``kernels_h200.SHAPES``), M, the op and the config (the
kernels_h200 sweep's winners at bit layout 2, results/h200-2026-12-01-kernels-layout2.json, and the
stream-K swap-AB kernel).
The weights are the sweep's (``synthetic_weight``, outlier rate 2e-4). Every case's output is
checked against the fp64 result first; the script prints one line per case (label, launch order,
check) for matching ncu's report to it. Prints nothing ncu does not already time: the numbers
live in ncu's report.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import specpilot  # noqa: E402

specpilot.__path__.append(str(ROOT))  # uninstalled checkout: specpilot.kernels lives in ./kernels
import torch  # noqa: E402

import kernels_h200 as kb  # noqa: E402  (shapes)
from specpilot.kernels import w12  # noqa: E402
from specpilot.kernels.common.check import check_close  # noqa: E402
from specpilot.kernels.common.check import gemm_exact  # noqa: E402
from specpilot.kernels.skinny_gemm.triton import skinny_gemm  # noqa: E402
from specpilot.kernels.tuning.ops import synthetic_weight  # noqa: E402
from specpilot.kernels.w12_gemm.triton import w12_gemm  # noqa: E402
from specpilot.kernels.w12f_gemm.triton import w12f_gemm  # noqa: E402

_GEMV = {"kernel": "gemv", "SPLIT_K": 1, "num_stages": 3, "DECODE": "prmt", "ESC_CHUNK": 4,
         "L2_PREFETCH": 0, "ESC_EARLY": 1}
_DOT = {"kernel": "dot", "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 2,
        "num_stages": 3, "DECODE": "prmt", "ESC_CHUNK": 1, "L2_PREFETCH": 0, "PREFETCH": 0,
        "BLOCK_T": 0, "MMA_V2": 0, "BLOCK_T_MIN": 16}
_DOT_SK = {"kernel": "dot_sk", "BLOCK_N": 32, "BLOCK_K": 128, "PROGRAMS_PER_SM": 5, "MAX_REGS": 0,
           "num_warps": 2, "num_stages": 3, "DECODE": "prmt", "ESC_CHUNK": 1, "PDL": 0,
           "BLOCK_T_MIN": 16}
_BF16_DOT = {"kernel": "dot", "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4,
             "num_stages": 4, "L2_PREFETCH": 0, "PREFETCH": 0, "MMA_V2": 0,
             "BLOCK_T_MIN": 16}
_W12F = {"kernel": "mma", "SPLIT_K": 1, "DECODE": "prmt", "ESC_CHUNK": 1, "PREFETCH": 1,
         "num_stages": 1, "MMA_V2": 0, "CHAINS": 1, "ROWS_PER_WARP": 16, "ESC_EARLY": 0}
_BF16_TMA = {"kernel": "tma", "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4,
             "num_stages": 5, "MMA_V2": 0, "BLOCK_T_MIN": 16}
_BF16_TMA_SK = {"kernel": "tma_sk", "BLOCK_N": 64, "BLOCK_K": 128, "PROGRAMS_PER_SM": 1,
                "num_warps": 4, "num_stages": 4, "MMA_V2": 0, "BLOCK_T_MIN": 16}

# label: (shape, M, op, config)
CASES = {
    "gate_up_m1_w12_gemv": ("q3_gate_up", 1, "w12",
                            {**_GEMV, "BLOCK_N": 4, "BLOCK_K": 512, "num_warps": 2,
                             "K_STAGES": 4}),
    "gate_up_m2_w12_gemv": ("q3_gate_up", 2, "w12",
                            {**_GEMV, "BLOCK_N": 4, "BLOCK_K": 256, "num_warps": 1,
                             "K_STAGES": 3}),
    "gate_up_m4_w12_dot": ("q3_gate_up", 4, "w12", _DOT),
    "gate_up_m16_w12_dot": ("q3_gate_up", 16, "w12", _DOT),
    "gate_up_m16_bf16_dot": ("q3_gate_up", 16, "bf16", _BF16_DOT),
    "down_m16_w12_dot_sk4": ("q3_down", 16, "w12", {**_DOT, "SPLIT_K": 4}),
    # the swap-AB kernel under stream-K (no partial last wave), 5 programs per SM
    "gate_up_m4_w12_dot_streamk": ("q3_gate_up", 4, "w12", _DOT_SK),
    "down_m16_w12_dot_streamk": ("q3_down", 16, "w12", _DOT_SK),
    # token tiles of 8 and 4 at M = 4 and 8 (BLOCK_T_MIN): 32 / 28 KB of shared memory, not 40
    "gate_up_m4_w12_dot_t8": ("q3_gate_up", 4, "w12", {**_DOT, "BLOCK_T_MIN": 8}),
    "gate_up_m4_w12_dot_t4": ("q3_gate_up", 4, "w12", {**_DOT, "BLOCK_T_MIN": 4}),
    "gate_up_m8_w12_dot": ("q3_gate_up", 8, "w12", _DOT),
    "gate_up_m8_w12_dot_t8": ("q3_gate_up", 8, "w12", {**_DOT, "BLOCK_T_MIN": 8}),
    # the sweep's winner at M = 4 (32 x 256 pairs, 2 stages, 8 tokens), the same tile on
    # fragment-order planes (h200_w12_frag.py) and another fragment variant
    "gate_up_m4_w12_dot_k256": ("q3_gate_up", 4, "w12",
                                {**_DOT, "BLOCK_K": 256, "num_stages": 2, "BLOCK_T_MIN": 8}),
    "gate_up_m4_frag_2x8x8x2": ("q3_gate_up", 4, "frag", "2x8x8x2"),
    "gate_up_m4_frag_1x4x8x4": ("q3_gate_up", 4, "frag", "1x4x8x4"),
    # the bf16 TMA tiles as a grid and under stream-K (one flat loop per program), and stream-K
    # held to one whole tile per program (80 programs for gdn_out's 80 tiles: the grid's work)
    "gdn_out_m32_bf16_tma": ("q3_gdn_out", 32, "bf16", _BF16_TMA),
    "gdn_out_m32_bf16_tma_sk": ("q3_gdn_out", 32, "bf16", _BF16_TMA_SK),
    "gdn_out_m32_bf16_tma_sk_80": ("q3_gdn_out", 32, "bf16",
                                   {**_BF16_TMA_SK, "_test_programs": 80}),
    "qkvg_m64_bf16_tma": ("q3_attn_qkvg", 64, "bf16", _BF16_TMA),
    "qkvg_m64_bf16_tma_sk": ("q3_attn_qkvg", 64, "bf16", _BF16_TMA_SK),
    # the fragment-order W12 GEMM's winners of results/h200-2026-12-03-kernels-split8.json at
    # M = 8 and 16 (where M = 16 costs 10-15% more than M = 8 on the same bytes), and the bf16
    # winners of the same rows
    "qkvg_m8_w12f": ("q3_attn_qkvg", 8, "w12f", {**_W12F, "BLOCK_K": 256, "num_warps": 1,
                                                  "BLOCK_T": 8, "CHAINS": 2}),
    "qkvg_m16_w12f": ("q3_attn_qkvg", 16, "w12f", {**_W12F, "BLOCK_K": 256, "num_warps": 2,
                                                    "BLOCK_T": 16, "CHAINS": 2}),
    "gate_up_m8_w12f": ("q3_gate_up", 8, "w12f", {**_W12F, "BLOCK_K": 64, "num_warps": 2,
                                                   "BLOCK_T": 8}),
    "gate_up_m16_w12f": ("q3_gate_up", 16, "w12f", {**_W12F, "BLOCK_K": 128, "SPLIT_K": 2,
                                                     "num_warps": 4, "BLOCK_T": 16,
                                                     "MMA_V2": 1}),
    "gdn_out_m8_w12f": ("q3_gdn_out", 8, "w12f", {**_W12F, "BLOCK_K": 128, "SPLIT_K": 8,
                                                   "num_warps": 1, "BLOCK_T": 8, "CHAINS": 2}),
    "qkvg_m8_bf16_dot": ("q3_attn_qkvg", 8, "bf16", {**_BF16_DOT, "SPLIT_K": 1,
                                                      "BLOCK_T_MIN": 8}),
    "gate_up_m16_bf16_best": ("q3_gate_up", 16, "bf16", {**_BF16_DOT, "BLOCK_K": 64, "SPLIT_K": 1,
                                                         "num_stages": 3, "MMA_V2": 1}),
}


def run_case(label: str, order: int) -> tuple:
    """Build, check and warm up one case; returns the launch to profile."""
    name, m, op, config = CASES[label]
    k, n = kb.SHAPES[name]
    w = synthetic_weight(n, k, torch.device("cuda"), 0, outlier_rate=2e-4)
    x = torch.randn((m, k), device="cuda").to(torch.bfloat16)
    exact, abs_sum = gemm_exact(x, w)
    if op == "w12":
        packed = w12.pack(w)
        del w
        launch = lambda: w12_gemm(x, packed, config=config)  # noqa: E731
    elif op == "w12f":
        packed = w12.pack(w, order="frag")
        del w
        launch = lambda: w12f_gemm(x, packed, config=config)  # noqa: E731
    elif op == "frag":
        import h200_w12_frag as frag

        packed = w12.pack(w)
        variant = frag.parse_variant(config)
        tiles = frag.frag_pack(packed, variant["W"], variant["FC"])
        del w
        launch = lambda: frag.frag_call(x, tiles, packed, variant)  # noqa: E731
    else:
        launch = lambda: skinny_gemm(x, w, config=config)  # noqa: E731
    result = check_close(label, launch(), exact, abs_sum)
    for _ in range(3):
        launch()
    torch.cuda.synchronize()
    print(f"case {order}: {label} {name} K={k} N={n} M={m} {op} {config} check={result}",
          flush=True)
    return launch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated labels")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("h200_w12_ncu.py needs a CUDA GPU", file=sys.stderr)
        return 2
    labels = args.cases.split(",")
    unknown = [lbl for lbl in labels if lbl not in CASES]
    if unknown:
        print(f"unknown cases {unknown}; known: {sorted(CASES)}", file=sys.stderr)
        return 2
    for order, label in enumerate(labels):
        launch = run_case(label, order)
        torch.cuda.profiler.start()
        launch()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
