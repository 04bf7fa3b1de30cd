"""What the GEMMs compile to for sm_90 (no GPU needed: Triton compiles for a named target).

- The W12 GEMMs' weight loads are 16-byte vectors. A pointer expression whose alignment Triton
  cannot prove (a ``%`` in the blocked-plane offset did that) silently turns every weight load into
  a byte load: 1.5x slower than bf16 on the H200, with every result still right.
- The W12 decode stays cheap in issue slots: the K loop's SASS per weight is bounded (bit layout 2
  compiles to about 5 for the GEMV and 3 for the ``mma.sync`` kernel; the former layout to 7.6
  and 5.0).
- Under PDL, the GEMVs and the swap-AB kernels with ``PREFETCH`` load only weights (W12 with
  ``ESC_EARLY``: and the rows' escape ranges) before ``griddepcontrol.wait``; with
  ``L2_PREFETCH``, thread 0 also issues one bulk L2 prefetch per contiguous weight run there.

The compiles run in one child process: this directory's conftest puts the parent under the Triton
interpreter, which has no compiler.
"""

import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

POINTERS = {"x_ptr": "*bf16", "w_ptr": "*bf16", "planes_ptr": "*u8", "row_ptr": "*i32",
            "esc_col_ptr": "*i32", "esc_delta_ptr": "*fp32", "out_ptr": "*bf16", "ws_ptr": "*fp32",
            "lock_ptr": "*i32"}
# what a launch at 16-aligned sizes passes
ALIGNED = ("N", "K", "K2", "k_per_split", "stride_xm", "stride_wn")


class _Compiler:
    """One child process, started on first use, that compiles every kernel this module asks for
    (one import of torch and Triton instead of one per test): a JSON request per line in, the PTX
    as one JSON string per line out."""

    proc = None

    @classmethod
    def ptx(cls, request: list) -> str:
        if cls.proc is None or cls.proc.poll() is not None:
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            code = (f"import sys, json; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
                    "import test_codegen as t; t.serve()")
            cls.proc = subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        cls.proc.stdin.write(json.dumps(request) + "\n")
        cls.proc.stdin.flush()
        answer = json.loads(cls.proc.stdout.readline() or '{"error": "the compiler exited"}')
        assert "ptx" in answer, answer["error"][-3000:]
        return answer["ptx"]


def serve() -> None:
    """The child's loop: compile each request (:func:`compile_ptx` arguments) until stdin ends."""
    import traceback

    for line in sys.stdin:
        try:
            answer = {"ptx": compile_ptx(*json.loads(line))}
        # any failure is the test's to report, with the child's traceback
        except Exception:  # noqa: BLE001
            answer = {"error": traceback.format_exc()}
        print(json.dumps(answer), flush=True)


@pytest.fixture(scope="module", autouse=True)
def _stop_compiler():
    yield
    if _Compiler.proc is not None:
        _Compiler.proc.stdin.close()
        _Compiler.proc.wait(timeout=60)
        _Compiler.proc = None


def ptx(kernel_name: str, constexprs: dict, num_warps: int, num_stages: int,
        op: str = "w12_gemm") -> str:
    """The kernel's PTX for sm_90, compiled in the child process without the interpreter."""
    return _Compiler.ptx([kernel_name, json.dumps(constexprs), num_warps, num_stages, op])


def compile_ptx(kernel_name: str, constexprs_json: str, num_warps: int, num_stages: int,
                op: str, what: str = "ptx") -> str:
    """The kernel's PTX, or with ``what="sass"`` its disassembled cubin (one line per
    instruction or label)."""
    import importlib

    from specpilot.kernels.common.sass import compile_sm90
    from specpilot.kernels.common.sass import disassemble

    from specpilot.kernels.common.mma import mma_v2_compile

    kernel = getattr(importlib.import_module(f"specpilot.kernels.{op}.triton"), kernel_name)
    constexprs = json.loads(constexprs_json)
    pointers = POINTERS
    if kernel_name.endswith(("_tma", "_tma_sk")):  # host tensor descriptors, by their boxes
        box = constexprs["BLOCK_K"]
        pointers = {**POINTERS, "w_desc": f"tensordesc<bf16[{constexprs['BLOCK_N']}, {box}]>",
                    "x_desc": f"tensordesc<bf16[{constexprs['BLOCK_T']}, {box}]>"}
    with mma_v2_compile(bool(constexprs.get("MMA_V2"))):  # as the launchers compile it
        compiled = compile_sm90(kernel, constexprs, num_warps, num_stages, pointers, ALIGNED)
    if what == "sass":
        return "\n".join(disassemble(compiled.asm["cubin"]))
    return compiled.asm["ptx"]


def sass(kernel_name: str, constexprs: dict, num_warps: int, num_stages: int,
         op: str = "w12_gemm") -> list[str]:
    """The kernel's sm_90a SASS (:func:`specpilot.kernels.common.sass.disassemble`), compiled in
    the child process."""
    request = [kernel_name, json.dumps(constexprs), num_warps, num_stages, op, "sass"]
    return _Compiler.ptx(request).split("\n")


def weight_loads(code: str) -> Counter:
    """Byte widths of the evict-first (weight) loads and of the cp.async copies."""
    widths = Counter()
    for op in re.findall(r"ld\.global\.L1::evict_first[\w.:]*", code):
        widths[16 if ".v4.b32" in op else 4 if op.endswith(".b32") else 1] += 1
    for size in re.findall(r"cp\.async\.\S+ \[[^\]]+\], \[[^\]]+\], (0x\w+|\d+)", code):
        widths[int(size, 0)] += 1
    return widths


# the mma.sync swap-AB kernel (BLOCK_N = 16 x 2 warps)
W12_DOT = {"BLOCK_N": 32, "BLOCK_K": 128, "BLOCK_T": 16, "SPLIT_K": 1, "BR": 4, "BP": 256,
           "ASM": True, "X_F32": False, "ESC_CHUNK": 1, "L2_PREFETCH": 0, "MMA_V2": False}


@pytest.mark.parametrize("kernel, constexprs, num_warps, num_stages", [
    pytest.param("w12_gemm_fwd_kernel_gemv",
                 {"BLOCK_N": 8, "BLOCK_K": 256, "SPLIT_K": 1, "BR": 4, "BP": 512, "ASM": True,
                  "ESC_CHUNK": 1, "K_STAGES": 1, "ESC_EARLY": False, "L2_PREFETCH": 0,
                  "BLOCK_M": 1}, 4, 3, id="gemv"),
    # the GEMV for 2 rows, each weight decoded once for both
    pytest.param("w12_gemm_fwd_kernel_gemv",
                 {"BLOCK_N": 8, "BLOCK_K": 256, "SPLIT_K": 1, "BR": 4, "BP": 512, "ASM": True,
                  "ESC_CHUNK": 1, "K_STAGES": 1, "ESC_EARLY": False, "L2_PREFETCH": 0,
                  "BLOCK_M": 2}, 4, 3, id="gemv-2-rows"),
    pytest.param("w12_gemm_fwd_kernel_gemv",
                 {"BLOCK_N": 4, "BLOCK_K": 512, "SPLIT_K": 1, "BR": 4, "BP": 512, "ASM": True,
                  "ESC_CHUNK": 4, "K_STAGES": 3, "ESC_EARLY": True, "L2_PREFETCH": 0,
                  "BLOCK_M": 1}, 2, 3, id="gemv-early-piped"),
    pytest.param("w12_gemm_fwd_kernel_dot", {**W12_DOT, "PREFETCH": False}, 2, 3, id="dot"),
    pytest.param("w12_gemm_fwd_kernel_dot", {**W12_DOT, "PREFETCH": True, "PDL": True}, 2, 3,
                 id="dot-prefetch"),
])
def test_weight_loads_are_16_byte_vectors(kernel, constexprs, num_warps, num_stages):
    widths = weight_loads(ptx(kernel, constexprs, num_warps, num_stages))
    assert widths and set(widths) == {16}, widths


GEMV = {"BLOCK_N": 4, "BLOCK_K": 512, "SPLIT_K": 1, "K_STAGES": 1, "PDL": True,
        "L2_PREFETCH": 0, "BLOCK_M": 1}
BF16_DOT = {"BLOCK_N": 64, "BLOCK_K": 128, "BLOCK_T": 16, "SPLIT_K": 1, "PREFETCH": True,
            "PDL": True, "L2_PREFETCH": 0, "MMA_V2": False}


@pytest.mark.parametrize("op, kernel, constexprs, num_warps", [
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_dot", BF16_DOT, 4, id="bf16-64x4"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_dot", {**BF16_DOT, "BLOCK_N": 128}, 8,
                 id="bf16-128x8"),
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_dot",
                 {**W12_DOT, "BLOCK_N": 64, "PREFETCH": False}, 4, id="w12-64x4"),
])
def test_mma_v2_compiles_to_mma_sync_instead_of_wgmma(op, kernel, constexprs, num_warps):
    """``MMA_V2`` (:mod:`specpilot.kernels.common.mma`): a tile of 4+ warps compiles to ``wgmma``
    without it and to ``mma.sync`` with it."""
    v3 = ptx(kernel, {**constexprs, "MMA_V2": False}, num_warps, 3, op)
    v2 = ptx(kernel, {**constexprs, "MMA_V2": True}, num_warps, 3, op)
    assert "wgmma.mma_async" in v3 and "mma.sync" not in v3
    assert "mma.sync.aligned" in v2 and "wgmma" not in v2


@pytest.mark.parametrize("op, kernel, constexprs", [
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BR": 4, "BP": 512, "ASM": True, "ESC_CHUNK": 1, "ESC_EARLY": False},
                 id="w12"),
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BR": 4, "BP": 512, "ASM": True, "ESC_CHUNK": 4, "ESC_EARLY": True,
                  "K_STAGES": 3}, id="w12-early-piped"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_gemv", GEMV, id="bf16"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_gemv", {**GEMV, "BLOCK_M": 2},
                 id="bf16-2-rows"),
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BR": 4, "BP": 512, "ASM": True, "ESC_CHUNK": 1, "ESC_EARLY": False,
                  "BLOCK_M": 2}, id="w12-2-rows"),
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_dot",
                 {**W12_DOT, "PREFETCH": True, "PDL": True}, id="w12-dot"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_dot", BF16_DOT, id="bf16-dot"),
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BR": 4, "BP": 512, "ASM": True, "ESC_CHUNK": 4, "ESC_EARLY": True,
                  "K_STAGES": 3, "L2_PREFETCH": 4}, id="w12-early-piped-l2"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_gemv", {**GEMV, "L2_PREFETCH": 2},
                 id="bf16-l2"),
])
def test_first_weights_load_before_the_pdl_wait(op, kernel, constexprs):
    """Under PDL the GEMVs, and the swap-AB kernels with ``PREFETCH``, issue their first K step's
    weight loads (W12: and the escape ranges) before ``griddepcontrol.wait``, so they overlap the
    previous kernel's tail. x (the evict-last loads), which that kernel may write, and the
    pipelined (``cp.async``) loads come only after it."""
    code = ptx(kernel, constexprs, 2, 3, op)
    assert code.count("griddepcontrol.wait") == 1, "expected one PDL wait"
    before = code.split("griddepcontrol.wait")[0]
    assert weight_loads(before), "no weight load is issued before the PDL wait"
    assert "evict_last" not in before, "x is read before the PDL wait"
    copies = [c for c in re.findall(r"cp\.async[\w.:]*", before)
              if c != "cp.async.bulk.prefetch.L2.global"]
    assert not copies, f"a pipelined load is issued before the PDL wait: {copies}"
    # Everything else is a weight load, but the rows' escape ranges (int32 scalars) with
    # ESC_EARLY; an escape's x value (a bf16 gather) would be a b16 load.
    other = [ld for ld in re.findall(r"ld\.global[\w.:]*", before) if "evict_first" not in ld]
    allowed = {"ld.global.b32"} if constexprs.get("ESC_EARLY") else set()
    assert set(other) <= allowed, f"loads before the PDL wait besides the weights: {other}"


@pytest.mark.parametrize("op, kernel, constexprs, num_runs", [
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BLOCK_N": 8, "BLOCK_K": 256, "BR": 4, "BP": 512, "ASM": True,
                  "ESC_CHUNK": 1, "ESC_EARLY": False, "L2_PREFETCH": 8}, 2, id="w12-gemv"),
    pytest.param("w12_gemm", "w12_gemm_fwd_kernel_dot", {**W12_DOT, "PREFETCH": True,
                                                         "PDL": True, "L2_PREFETCH": 2}, 8,
                 id="w12-dot"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_gemv", {**GEMV, "L2_PREFETCH": 1}, 4,
                 id="bf16-gemv"),
    pytest.param("skinny_gemm", "skinny_gemm_fwd_kernel_dot", {**BF16_DOT, "L2_PREFETCH": 16},
                 64, id="bf16-dot"),
])
def test_l2_prefetch_is_one_thread_per_run_before_the_pdl_wait(op, kernel, constexprs,
                                                                 num_runs):
    """``L2_PREFETCH``: one bulk L2 prefetch per contiguous run of the program's weights (W12:
    per row block of 4 rows; bf16: per row), issued before the PDL wait by thread 0 only; none at
    ``L2_PREFETCH = 0``."""
    code = ptx(kernel, constexprs, 2, 3, op)
    before, after = code.split("griddepcontrol.wait")
    prefetches = re.findall(r"(@\w+ )?cp\.async\.bulk\.prefetch\.L2\.global", before)
    assert len(prefetches) == num_runs, prefetches
    assert all(p.startswith("@") for p in prefetches), "a prefetch is not predicated"
    assert "setp.eq.u32 p, t, 0" in before and "%tid.x" in before
    assert "cp.async.bulk.prefetch" not in after
    assert "cp.async.bulk.prefetch" not in ptx(kernel, {**constexprs, "L2_PREFETCH": 0}, 2, 3, op)


@pytest.mark.parametrize("kernel, constexprs, num_warps, most", [
    # the GEMV of experiments/sass_per_weight.py: 5.08 at 24aff53 (7.58 with bit layout 1)
    pytest.param("w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BLOCK_K": 256, "BR": 4, "BP": 512, "ASM": True, "ESC_CHUNK": 4,
                  "ESC_EARLY": True, "K_STAGES": 3}, 1, 5.6, id="gemv"),
    # DECODE="prmt-bf16" (ASM 2): bf16 pairs widened by Triton, 5.59
    pytest.param("w12_gemm_fwd_kernel_gemv",
                 {**GEMV, "BLOCK_K": 256, "BR": 4, "BP": 512, "ASM": 2, "ESC_CHUNK": 4,
                  "ESC_EARLY": True, "K_STAGES": 3}, 1, 6.2, id="gemv-prmt-bf16"),
    # the mma.sync swap-AB kernel: 2.96 (4.96 with bit layout 1)
    pytest.param("w12_gemm_fwd_kernel_dot", {**W12_DOT, "BP": 512, "PREFETCH": True, "PDL": True},
                 2, 3.3, id="dot"),
    # on a token tile of 8 (BLOCK_T_MIN 8 at M <= 8): 2.43, half the HMMAs and x loads
    pytest.param("w12_gemm_fwd_kernel_dot",
                 {**W12_DOT, "BP": 512, "BLOCK_T": 8, "PREFETCH": True, "PDL": True}, 2, 2.7,
                 id="dot-8-tokens"),
])
def test_w12_k_loop_sass_per_weight_is_bounded(kernel, constexprs, num_warps, most):
    """The K loop's SASS instructions per weight one thread decodes (sm_90a, loads, decode,
    multiply and loop overhead together), at most about 10% above what the current decode compiles
    to: a decode or layout change that costs issue bandwidth fails here, not on the GPU."""
    from specpilot.kernels.common.sass import WORK
    from specpilot.kernels.common.sass import main_loop
    from specpilot.kernels.common.sass import opcode

    body = main_loop(sass(kernel, constexprs, num_warps, 3))
    assert any(WORK.match(opcode(ins)) for ins in body), "no K loop with multiplies found"
    weights = 2 * constexprs["BLOCK_N"] * constexprs["BLOCK_K"] / (32 * num_warps)
    per_weight = len(body) / weights
    assert per_weight <= most, f"{per_weight:.2f} SASS instructions per weight (bound {most})"


@pytest.mark.parametrize("mma_v2, mma", [(False, "wgmma.mma_async"), (True, "mma.sync")])
def test_tma_kernel_copies_whole_tiles_with_the_tensor_memory_accelerator(mma_v2, mma):
    """The ``tma`` skinny GEMM: each K step's weight and x tiles are one 2-D bulk tensor copy
    each, with no per-thread ``cp.async`` or global loads of them, on wgmma or (``MMA_V2``)
    mma.sync."""
    code = ptx("skinny_gemm_fwd_kernel_tma",
               {"BLOCK_N": 64, "BLOCK_K": 128, "BLOCK_T": 16, "SPLIT_K": 1, "PDL": True,
                "MMA_V2": mma_v2}, 4, 4, op="skinny_gemm")
    assert "cp.async.bulk.tensor.2d" in code
    assert mma in code
    assert not re.search(r"cp\.async\.c[ag]\.", code)
    assert "ld.global" not in code


@pytest.mark.parametrize("num_stages", [3, 4])
def test_tma_streamk_kernel_copies_ahead_across_its_flat_loop(num_stages):
    """``tma_sk``: the program's K steps are one loop that Triton pipelines, its first
    ``num_stages - 1`` steps' two copies issued before the loop and two in it. (An atomic or a
    barrier in the loop -- the partial segments' counter -- made Triton leave it unpipelined: two
    copies, each waited for at once.)"""
    code = ptx("skinny_gemm_fwd_kernel_tma_sk",
               {"BLOCK_N": 64, "BLOCK_K": 128, "BLOCK_T": 64, "PDL": True, "MMA_V2": False}, 4,
               num_stages, op="skinny_gemm")
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.2d", code)) == 2 * num_stages
    assert "wgmma.mma_async" in code

