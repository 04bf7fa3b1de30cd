"""experiments/h200_w12_frag.py: W12 planes stored per tile in the order the ``mma.sync`` A operand
holds them. The experiment's kernels (``cp.async`` copies, and TMA copies) must compute what the
product's W12 GEMM computes (the pack permutation and the kernel's reshape/permute are inverses),
and the plane tiles must reach the MMA with no layout conversion: one 16-byte ``cp.async`` and
one ``LDS.128`` per thread and chunk.
Its speed lives in ``experiments/results/h200-2026-12-02-w12-frag-*.json``; the product's
version of these kernels is tested in ``test_w12f_gemm.py``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specpilot.kernels import w12
from specpilot.kernels.common.check import check_close
from specpilot.kernels.common.check import gemm_exact
from specpilot.kernels.tuning.ops import synthetic_weight
from specpilot.kernels.w12_gemm.triton import w12_gemm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import h200_w12_frag as frag  # noqa: E402


@pytest.mark.parametrize("m, k, n, variant", [
    (3, 399, 70, "2x4x16x3"),  # odd K, N past the last row tile, 2 K steps (one padded)
    (5, 530, 33, "1x8x8x4"),  # 8-token tile, 256-pair steps
    (16, 260, 64, "4x2x16x2v2"),  # 4 warps
    # TMA copies of the plane tiles (16- and 32-byte descriptor rows) and of x (zero past M)
    (3, 512, 70, "2x4x16x3t"),
    (5, 1024, 33, "2x8x8x3t"),
    (5, 530, 33, "2x4x8x1"),  # one stage: the planes go straight to registers
])
def test_fragment_kernel_computes_what_the_w12_gemm_computes(m, k, n, variant):
    torch.manual_seed(0)
    w = synthetic_weight(n, k, torch.device("cpu"), 0, outlier_rate=2e-2)
    packed = w12.pack(w)
    assert packed.esc_col.numel() > 0  # the escape epilogue runs too
    v = frag.parse_variant(variant)
    x = torch.randn(m, k).to(torch.bfloat16)
    out = frag.frag_call(x, frag.frag_pack(packed, v["W"], v["FC"]), packed, v)
    # same products in the same K order, and the same escape epilogue: the same bits
    assert torch.equal(out, w12_gemm(x, packed))


@pytest.mark.parametrize("m, k, n, variant", [
    (3, 399, 70, "2x4x16x1k3"),  # 3 splits of 2 steps, the last one short; N past the tiles
    (5, 1030, 33, "1x8x8x1k2"),
    (1, 399, 70, "2x4x8x1g"),  # the GEMV
    (1, 1030, 33, "1x8x8x1k3g"),  # the GEMV, split
])
def test_split_and_gemv_variants_match_the_exact_product_deterministically(m, k, n, variant):
    """Split K and the GEMV sum in another order than the W12 GEMM, so they are held to the
    exact result's tolerance (escapes applied once, by split 0), and to the same bits twice."""
    torch.manual_seed(0)
    w = synthetic_weight(n, k, torch.device("cpu"), 0, outlier_rate=2e-2)
    packed = w12.pack(w)
    v = frag.parse_variant(variant)
    x = torch.randn(m, k).to(torch.bfloat16)
    tiles = frag.frag_pack(packed, v["W"], v["FC"])
    out = frag.frag_call(x, tiles, packed, v)
    exact, abs_sum = gemm_exact(x, w)
    assert check_close(variant, out, exact, abs_sum).ok
    assert torch.equal(out, frag.frag_call(x, tiles, packed, v))


def test_fragment_tma_variant_refuses_what_its_copies_cannot_do():
    """x rows the TMA cannot address (not 16-byte multiples) are refused with a message."""
    w = synthetic_weight(40, 1023, torch.device("cpu"), 0)
    packed = w12.pack(w)
    v = frag.parse_variant("1x4x8x4t")
    with pytest.raises(ValueError, match="16-byte x rows"):
        frag.frag_call(torch.randn(5, 1023).to(torch.bfloat16),
                       frag.frag_pack(packed, v["W"], v["FC"]), packed, v)


def test_fragment_pack_is_a_permutation_of_each_tile():
    """Every byte of a [32, 128]-pair tile lands exactly once in its fragment-order tile."""
    w = synthetic_weight(32, 256, torch.device("cpu"), 1)
    packed = w12.pack(w)
    tiles = frag.frag_pack(packed, 2, 4)
    assert tiles.shape == (1, 1, 3, 4096)
    sm, nib = w12.format.unblock_planes(packed.planes, 32, 128)
    for plane, tile in zip((nib, sm[:, :128], sm[:, 128:]), tiles[0, 0]):
        assert torch.equal(torch.sort(plane.flatten()).values, torch.sort(tile).values)


_COMPILE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import h200_w12_frag as frag
from specpilot.kernels.common.sass import compile_sm90, disassemble, main_loop, opcode
ptrs = {"x_ptr": "*bf16", "tiles_ptr": "*u8", "row_ptr": "*i32", "esc_col_ptr": "*i32",
        "esc_delta_ptr": "*fp32", "out_ptr": "*bf16", "ws_ptr": "*fp32", "lock_ptr": "*i32"}
c = compile_sm90(frag.frag_kernel, {"W": 2, "FC": 4, "BLOCK_T": 8, "ESC_CHUNK": 1, "ASM": 1,
                                    "SPLIT_K": 1}, 2, 3,
                 ptrs, ("N", "K", "K2", "stride_xm", "KT"))
lines = c.asm["ttgir"].splitlines()
to_a = [ln for ln in lines if "convert_layout" in ln and "dot_op<{opIdx = 0" in ln.split("->")[-1]]
body = main_loop(disassemble(c.asm["cubin"]))
print(json.dumps({"converts_to_a": len(to_a),
                  "lds128": sum(1 for i in body if opcode(i) == "LDS" and i.startswith("LDS.128")),
                  "copies128": sum(1 for i in body if i.startswith("LDGSTS") and ".128" in i)}))
"""


def test_fragment_tiles_reach_the_mma_without_a_layout_conversion():
    """sm_90a compile (a child process: this directory runs under the interpreter) of the 32 x
    128-pair tile: no ``convert_layout`` into the A operand, 3 planes x 4 chunks of ``LDS.128``
    per K step, and the weight copies 16 bytes each."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE, str(ROOT / "experiments")], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["converts_to_a"] == 0
    assert got["lds128"] == 3 * 4
    # each thread copies 3 planes x 4 KB / 64 threads = 12 weight runs of 16 bytes per K step
    assert got["copies128"] >= 12
