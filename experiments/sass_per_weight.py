"""Static count of the W12 GEMMs' main-loop SASS per weight, compiled for sm_90a (no GPU needed).

Compiles a kernel config with Triton for a named target, disassembles the cubin with the
``nvdisasm`` Triton ships, finds the loop the K steps run in (the backward branch whose body holds
the most MMA / FMA instructions: :mod:`specpilot.kernels.common.sass`), and prints its
instructions by opcode, divided by the weights one thread decodes per iteration. A proxy, not a
timing: it says how much issue bandwidth the decode costs, which is what bounds the W12 GEMMs once
their loads are in flight. ``tests/kernels/test_codegen.py`` bounds the two presets' counts.

    python experiments/sass_per_weight.py [--kernel gemv|dot] [--config JSON] [--warps N]
"""

import argparse
import json
from collections import Counter

from specpilot.kernels.common.mma import mma_v2_compile
from specpilot.kernels.common.sass import compile_sm90
from specpilot.kernels.common.sass import disassemble
from specpilot.kernels.common.sass import main_loop
from specpilot.kernels.common.sass import opcode

PRESETS = {
    "gemv": ("w12_gemm_fwd_kernel_gemv",
             {"BLOCK_N": 4, "BLOCK_K": 256, "SPLIT_K": 1, "BR": 4, "BP": 512, "ASM": True,
              "ESC_CHUNK": 4, "K_STAGES": 3, "ESC_EARLY": True, "L2_PREFETCH": 0, "BLOCK_M": 1,
              "PDL": True}, 1, 3),
    "dot": ("w12_gemm_fwd_kernel_dot",
            {"BLOCK_N": 32, "BLOCK_K": 128, "BLOCK_T": 16, "SPLIT_K": 1, "BR": 4, "BP": 512,
             "ASM": True, "X_F32": False, "ESC_CHUNK": 1, "L2_PREFETCH": 0, "PREFETCH": True,
             "PDL": True, "MMA_V2": False}, 2, 3),
}
POINTERS = {"x_ptr": "*bf16", "planes_ptr": "*u8", "row_ptr": "*i32", "esc_col_ptr": "*i32",
            "esc_delta_ptr": "*fp32", "out_ptr": "*bf16", "ws_ptr": "*fp32", "lock_ptr": "*i32"}
ALIGNED = ("N", "K", "K2", "k_per_split", "stride_xm")


def cubin(kernel_name: str, constexprs: dict, num_warps: int, num_stages: int) -> bytes:
    """The sm_90a cubin of a W12 GEMM kernel config."""
    from specpilot.kernels.w12_gemm import triton as w12_gemm

    kernel = getattr(w12_gemm, kernel_name)
    with mma_v2_compile(bool(constexprs.get("MMA_V2"))):
        return compile_sm90(kernel, constexprs, num_warps, num_stages, POINTERS,
                            ALIGNED).asm["cubin"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernel", choices=sorted(PRESETS), default="gemv")
    parser.add_argument("--config", default="{}", help="JSON overrides of the preset constexprs")
    parser.add_argument("--warps", type=int, default=None)
    args = parser.parse_args()
    name, constexprs, warps, stages = PRESETS[args.kernel]
    constexprs = {**constexprs, **json.loads(args.config)}
    warps = args.warps or warps
    body = main_loop(disassemble(cubin(name, constexprs, warps, stages)))
    if not body:
        raise SystemExit("no loop with MMA / FMA instructions found")
    weights = 2 * constexprs["BLOCK_N"] * constexprs["BLOCK_K"] / (32 * warps)
    counts = Counter(opcode(s) for s in body)
    print(json.dumps({"kernel": name, "num_warps": warps, **constexprs}))
    print(f"main loop: {len(body)} instructions, {weights:g} weights per thread per iteration, "
          f"{len(body) / weights:.2f} instructions per weight")
    for op, n in counts.most_common():
        print(f"  {op:10s} {n:5d}  {n / weights:.2f}")


if __name__ == "__main__":
    main()
