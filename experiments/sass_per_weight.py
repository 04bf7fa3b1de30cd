"""Static count of the W12 GEMMs' main-loop SASS per weight, compiled for sm_90a (no GPU needed).

Compiles a kernel config with Triton for a named target, disassembles the cubin with the
``nvdisasm`` Triton ships, finds the loop the K steps run in (the backward branch whose body holds
the most MMA / FMA instructions), and prints its instructions by opcode, divided by the weights one
thread decodes per iteration. A proxy, not a timing: it says how much issue bandwidth the decode
costs, which is what bounds the W12 GEMMs once their loads are in flight.

    python experiments/sass_per_weight.py [--kernel gemv|dot] [--config JSON] [--warps N]
"""

import argparse
import inspect
import json
import os
import re
import subprocess
import tempfile
from collections import Counter

PRESETS = {
    "gemv": ("w12_gemm_fwd_kernel_gemv",
             {"BLOCK_N": 4, "BLOCK_K": 256, "SPLIT_K": 1, "BR": 4, "BP": 512, "ASM": True,
              "ESC_CHUNK": 4, "K_STAGES": 3, "ESC_EARLY": True, "L2_PREFETCH": 0, "BLOCK_M": 1,
              "PDL": True}, 1, 3),
    "dot": ("w12_gemm_fwd_kernel_dot",
            {"BLOCK_N": 32, "BLOCK_K": 128, "BLOCK_T": 16, "SPLIT_K": 1, "BR": 4, "BP": 512,
             "ASM": True, "X_F32": False, "ESC_CHUNK": 1, "L2_PREFETCH": 0, "PREFETCH": True,
             "PDL": True}, 2, 3),
}
POINTERS = {"x_ptr": "*bf16", "planes_ptr": "*u8", "row_ptr": "*i32", "esc_col_ptr": "*i32",
            "esc_delta_ptr": "*fp32", "out_ptr": "*bf16", "ws_ptr": "*fp32", "lock_ptr": "*i32"}
ALIGNED = ("N", "K", "K2", "k_per_split", "stride_xm")
WORK = re.compile(r"^(HMMA|HGMMA|FFMA|FMUL)")


def cubin(kernel_name: str, constexprs: dict, num_warps: int, num_stages: int) -> bytes:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from specpilot.kernels.w12_gemm import triton as w12_gemm

    kernel = getattr(w12_gemm, kernel_name)
    names = list(inspect.signature(kernel.fn).parameters)
    sig = {n: "constexpr" if n in constexprs
           else POINTERS.get(n, "fp32" if n == "scale" else "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n in POINTERS or n in ALIGNED}
    src = ASTSource(fn=kernel, signature=sig, attrs=attrs,
                    constexprs={(names.index(n),): v for n, v in constexprs.items()})
    options = {"num_warps": num_warps, "num_stages": num_stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options).asm["cubin"]


def disassemble(binary: bytes) -> list[str]:
    """SASS lines in order: instructions (without address and ``;``) and ``.L_x_N:`` labels."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(binary)
        f.flush()
        text = subprocess.run([tool, "-c", f.name], capture_output=True, text=True,
                              check=True).stdout
    out = []
    for line in text.splitlines():
        label = re.match(r"(\.L_x_\d+):", line)
        ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;", line)
        if label:
            out.append(label.group(1) + ":")
        elif ins:
            out.append(ins.group(1))
    return out


def main_loop(sass: list[str]) -> list[str]:
    """The instructions of the backward branch's body with the most MMA / FMA instructions."""
    where = {line[:-1]: i for i, line in enumerate(sass) if line.endswith(":")}
    work = lambda body: sum(bool(WORK.match(opcode(s))) for s in body)
    best = []
    for i, ins in enumerate(sass):
        m = re.search(r"BRA\s+`\((\.L_x_\d+)\)", ins)
        if m and where.get(m.group(1), i) < i:
            body = [s for s in sass[where[m.group(1)]:i + 1] if not s.endswith(":")]
            if work(body) > work(best):
                best = body
    return best


def opcode(ins: str) -> str:
    """The opcode without its predicate guard or modifiers."""
    return re.sub(r"^@!?U?P[T\d]\s+", "", ins).split()[0].split(".")[0]


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
