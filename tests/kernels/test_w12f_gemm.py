"""w12f_gemm (W12 GEMM on fragment-order planes): the plane order round-trips bit-exactly, the
kernels (interpreter) match the fp64 exact result of the unpacked weight on odd shapes, split K is
deterministic, the space refuses what the kernels cannot run, and on the sm_90a code the planes
reach the MMA with no layout conversion."""

import collections
import functools
import inspect
import json
import os
import subprocess
import sys

import pytest
import torch

from specpilot.kernels import w12
from specpilot.kernels import w12_gemm
from specpilot.kernels import w12f_gemm
from specpilot.kernels.common.check import check_close
from specpilot.kernels.common.check import gemm_exact
from specpilot.kernels.tuning.ops import complete_config
from specpilot.kernels.tuning.ops import get_op
from specpilot.kernels.tuning.ops import synthetic_weight
from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.triton import w12_unpack
from specpilot.kernels.w12f_gemm import space
from specpilot.kernels.w12f_gemm.triton import w12f_gemm as w12f_triton


def mma(warps=2, bk=32, block_t=8, split=1, mma_v2=0, prefetch=0, chains=1, rows=16,
        esc_early=0, esc_chunk=1):
    return {**space._mma(warps, bk, block_t, split, mma_v2, prefetch=prefetch, rows_per_warp=rows,
                         esc_early=esc_early, esc_chunk=esc_chunk),
            "DECODE": "int", "CHAINS": chains}


def tma(warps=2, bk=32, block_t=8, split=1, stages=3, mma_v2=0, chains=1, rows=16, esc_early=0,
        esc_chunk=1):
    return {**space._tma(warps, bk, block_t, stages, split, mma_v2, chains, rows, esc_early,
                         esc_chunk), "DECODE": "int"}


def gemv(warps=2, bk=32, split=1, prefetch=0):
    return {**space._gemv(warps, bk, split, prefetch=prefetch), "DECODE": "int"}


@pytest.mark.parametrize("shape", [(70, 399), (33, 1030), (16, 64), (5, 3), (1, 1), (0, 5)])
def test_frag_order_round_trips_bit_exactly(shape):
    """Normal weights with exact zeros, +-0, subnormals and outliers (escapes)."""
    torch.manual_seed(0)
    w = (torch.randn(shape) * 0.02).to(torch.bfloat16)
    flat = w.view(-1)
    if flat.numel() > 8:
        flat[::7] = 0
        flat[1::11] = -0.0
        flat[2::13] = 1e-40  # subnormal in fp32, flushed to a bf16 subnormal
        flat[3::17] = 300.0
    packed = w12.pack(w, order="frag")
    assert packed.order == "frag" and packed.planes.shape[3:] == (16, 32)
    assert torch.equal(packed.unpack().view(torch.int16), w.view(torch.int16))
    rows = w12.pack(w)
    assert torch.equal(packed.with_order("rows").planes, rows.planes)
    assert torch.equal(rows.with_order("frag").planes, packed.planes)
    again = W12Tensor.from_state_dict(packed.state_dict("l."), "l.")
    assert again.order == "frag" and torch.equal(again.planes, packed.planes)


def test_frag_block_bytes_follow_the_mma_a_fragment():
    """Byte (g, t, e3, e2, e1 e0) of a block is row 8 e2 + g, pair 16 e3 + 4 t + (e1 e0)."""
    w = synthetic_weight(16, 64, torch.device("cpu"), 3)
    packed = w12.pack(w, order="frag")
    sm, nib = packed.row_major()
    block = packed.planes[0, 0, 0].reshape(-1)  # nib plane of block (0, 0)
    for i in (0, 1, 5, 77, 200, 511):
        g, t, e3, e2, e = i >> 6, (i >> 4) & 3, (i >> 3) & 1, (i >> 2) & 1, i & 3
        assert block[i] == nib[8 * e2 + g, 16 * e3 + 4 * t + e]


def test_frag_state_never_reads_as_rows_order():
    """Fragment-order planes are saved as ``frag_planes``: a reader of rows order finds no
    ``planes`` (an error, not wrong weights), and the raw rows-order decode refuses them."""
    packed = w12.pack(synthetic_weight(16, 64, torch.device("cpu"), 0), order="frag")
    state = packed.state_dict()
    assert "frag_planes" in state and "planes" not in state
    assert "planes" in packed.with_order("rows").state_dict()
    with pytest.raises(ValueError, match="rows-order planes"):
        w12_unpack(packed)


EARLY_ESCAPES = [  # (M, K, N, config with ESC_EARLY 1, id)
    (17, 260, 64, mma(warps=4, bk=32, block_t=16, mma_v2=1, esc_early=1), "chunk1"),
    (5, 1090, 33, mma(warps=1, bk=64, split=4, prefetch=1, esc_early=1, esc_chunk=2), "split4"),
    (3, 999, 70, mma(warps=2, bk=32, chains=2, esc_early=1, esc_chunk=8), "chunk8"),
    (9, 130, 40, mma(warps=2, bk=32, esc_early=1, esc_chunk=8), "most-rows-all-early"),
]

CASES = [
    pytest.param(1, 399, 70, gemv(), id="gemv-oddK-rows-past-N"),
    pytest.param(1, 1030, 33, gemv(warps=1, split=4), id="gemv-split4-short-last"),
    pytest.param(1, 520, 50, gemv(warps=4, bk=32, split=2), id="gemv-4warps-one-row-tile"),
    pytest.param(1, 399, 70, mma(), id="mma-M1"),
    pytest.param(3, 399, 70, mma(split=4), id="mma-M3-split4"),
    pytest.param(5, 1030, 33, mma(warps=1, block_t=8), id="mma-M5-1warp"),
    pytest.param(17, 260, 64, mma(warps=4, bk=32, block_t=16, mma_v2=1), id="mma-M17-tiles"),
    pytest.param(6, 499, 64, mma(warps=4, bk=64, block_t=8, mma_v2=1), id="mma-64pair-steps"),
    pytest.param(40, 130, 20, mma(warps=1, bk=32, block_t=64, split=2), id="mma-M40-split2"),
    pytest.param(1, 1030, 33, gemv(warps=1, split=4, prefetch=1), id="gemv-prefetch-split4"),
    pytest.param(5, 1030, 33, mma(warps=1, split=4, prefetch=1), id="mma-prefetch-split4"),
    pytest.param(17, 260, 64, mma(warps=4, bk=32, block_t=16, mma_v2=1, prefetch=1),
                 id="mma-prefetch-M17-tiles"),
    pytest.param(5, 1090, 33, mma(warps=1, bk=64, split=4, chains=2), id="mma-2-chains"),
    pytest.param(17, 499, 64, mma(warps=2, bk=64, block_t=16, chains=4, prefetch=1),
                 id="mma-4-chains-prefetch"),
    pytest.param(3, 999, 33, mma(warps=1, bk=128, split=2, chains=4), id="mma-4-chains-split"),
    pytest.param(17, 260, 100, mma(warps=1, bk=32, block_t=16, rows=32),
                 id="mma-32-rows-per-warp-rows-past-N"),
    pytest.param(5, 1090, 70, mma(warps=2, bk=64, split=4, prefetch=1, chains=2, rows=32),
                 id="mma-32-rows-per-warp-split4"),
    # early escapes (ESC_EARLY 1): chunks of 1 (most rows have more: the epilogue walks the
    # rest), 2 and 8; each with late gathers (ESC_EARLY 2: their x read after the K loop) and
    # with the whole walk before the K loop (ESC_EARLY 3)
    *[pytest.param(m, k, n, {**config, "ESC_EARLY": early}, id=f"mma-esc-early-{early}-{name}")
      for m, k, n, config, name in EARLY_ESCAPES for early in (1, 2, 3)],
    # the program's escapes as one-hot MMAs after the K loop (ESC_EARLY 4): many slot rounds
    # (2% escapes), split K (only split 0 adds them), rows past N, two row blocks per warp, M = 1
    pytest.param(17, 260, 64, mma(warps=4, bk=32, block_t=16, mma_v2=1, esc_early=4),
                 id="mma-esc-mma-M17"),
    pytest.param(5, 1090, 33, mma(warps=1, bk=64, split=4, prefetch=1, esc_early=4,
                                  esc_chunk=2), id="mma-esc-mma-split4-64-slots"),
    pytest.param(17, 260, 100, mma(warps=1, bk=32, block_t=16, rows=32, esc_early=4),
                 id="mma-esc-mma-32-rows-per-warp-rows-past-N"),
    pytest.param(1, 399, 70, mma(chains=2, esc_early=4), id="mma-esc-mma-M1"),
    # the rounds inside the K loop (ESC_EARLY 8), one per K step while the step's planes load,
    # split s taking rounds s, s + SPLIT_K, ...: more rounds than steps (the rest after the
    # loop), split K (five splits, the last with only its prefetched step), 4 chains, M = 1,
    # all in the loop
    pytest.param(17, 260, 64, mma(warps=4, bk=32, block_t=16, mma_v2=1, esc_early=8),
                 id="mma-esc-loop-rounds-past-the-steps"),
    pytest.param(5, 1090, 33, mma(warps=1, bk=64, split=4, prefetch=1, esc_early=8,
                                  esc_chunk=2), id="mma-esc-loop-split4"),
    pytest.param(17, 499, 64, mma(warps=2, bk=64, block_t=16, chains=4, prefetch=1,
                                  esc_early=8), id="mma-esc-loop-4-chains"),
    pytest.param(1, 399, 70, mma(chains=2, esc_early=8), id="mma-esc-loop-M1"),
    pytest.param(17, 1090, 40, mma(warps=2, bk=64, block_t=16, split=6, prefetch=1,
                                   esc_early=8), id="mma-esc-loop-five-splits-last-loopless"),
    pytest.param(9, 1090, 40, mma(warps=2, bk=32, esc_early=8, esc_chunk=4),
                 id="mma-esc-loop-all-in-the-loop"),
    # the rounds' two exact parts (ESC_PARTS 2: exact and decoded weights in the one-hot
    # operand), after the K loop and inside it
    pytest.param(17, 260, 64, {**mma(warps=4, bk=32, block_t=16, mma_v2=1, esc_early=4),
                               "ESC_PARTS": 2}, id="mma-esc-mma-two-parts"),
    pytest.param(5, 1090, 33, {**mma(warps=1, bk=64, split=4, prefetch=1, esc_early=8,
                                     esc_chunk=2), "ESC_PARTS": 2},
                 id="mma-esc-loop-two-parts-split4"),
    pytest.param(17, 499, 64, {**mma(warps=2, bk=64, block_t=16, chains=2, esc_early=8),
                               "ESC_PARTS": 2}, id="mma-esc-loop-two-parts"),
    # split K 3 (9 K steps: 3 each) and 6 (2 each: 5 splits, the last with one step)
    pytest.param(5, 1090, 33, mma(warps=1, bk=64, split=3, prefetch=1, esc_early=4),
                 id="mma-esc-mma-split3"),
    pytest.param(17, 1090, 40, mma(warps=2, bk=64, block_t=16, split=6, prefetch=1),
                 id="mma-split6-five-splits"),
    # the A columns in wgmma's labels (WGMMA 1): x's pairs moved to the same labels
    pytest.param(17, 260, 64, {**mma(warps=4, bk=32, block_t=16), "WGMMA": 1}, id="mma-wgmma"),
    pytest.param(19, 1090, 70, {**mma(warps=4, bk=64, block_t=16, split=4, prefetch=1,
                                      chains=4), "WGMMA": 1}, id="mma-wgmma-4-chains-split4"),
]


@pytest.mark.parametrize("m, k, n, config, change", [
    pytest.param(1, 1030, 33, gemv(warps=1, split=4), {"PREFETCH": 1}, id="prefetch-gemv"),
    pytest.param(5, 1030, 33, mma(warps=1, split=4), {"PREFETCH": 1}, id="prefetch-mma"),
    pytest.param(17, 260, 64, mma(warps=4, bk=32, block_t=16, mma_v2=1), {"PREFETCH": 1},
                 id="prefetch-mma-16"),
    *[pytest.param(*case[:4], {"ESC_EARLY": 2}, id=f"late-gathers-{case[4]}")
      for case in EARLY_ESCAPES]])
def test_moving_loads_gives_the_same_bits(m, k, n, config, change):
    """Choices that only move loads give the bits of the config without them: ``PREFETCH``
    loads the first K step's planes before the PDL wait, ``ESC_EARLY`` 2 gathers the early
    escapes' x after the K loop instead of after the wait (against ``ESC_EARLY`` 1); the same
    products and sums in the same order."""
    torch.manual_seed(1)
    packed = w12.pack(synthetic_weight(n, k, torch.device("cpu"), 2, outlier_rate=2e-2),
                      order="frag")
    x = torch.randn(m, k).to(torch.bfloat16)
    assert torch.equal(w12f_gemm.linear(x, packed, config),
                       w12f_gemm.linear(x, packed, {**config, **change}))


@pytest.mark.parametrize("m, k, n, config", CASES)
def test_triton(m, k, n, config):
    """Against the exact product, with escape-rich weights (2% escapes, so a dropped or doubled
    escape correction fails), and the same bits twice (split K sums in a fixed order)."""
    torch.manual_seed(0)
    w = synthetic_weight(n, k, torch.device("cpu"), 0, outlier_rate=2e-2)
    packed = w12.pack(w, order="frag")
    assert packed.num_escapes > 0
    x = torch.randn(m, k).to(torch.bfloat16)
    exact, abs_sum = gemm_exact(x, w)
    out = w12f_gemm.linear(x, packed, config)
    assert check_close("w12f", out, exact, abs_sum).ok
    assert torch.equal(out, w12f_gemm.linear(x, packed, config))
    out32 = w12f_gemm.linear(x.float(), packed, config)  # the float32 twin's path
    assert out32.dtype == torch.float32 and check_close("w12f f32", out32, exact, abs_sum).ok


@pytest.mark.parametrize("m, k, n, config", [
    pytest.param(1, 400, 70, tma(), id="M1-rows-past-N"),
    pytest.param(5, 1040, 33, tma(warps=1, split=4, chains=2), id="split4-short-last-padded-K"),
    pytest.param(17, 272, 64, tma(warps=4, block_t=16, mma_v2=1, chains=2, stages=2),
                 id="M17-two-token-tiles"),
    pytest.param(9, 1152, 40, tma(warps=2, bk=64, esc_early=2, esc_chunk=4, stages=4),
                 id="late-gathers-64-pair-steps"),
    pytest.param(3, 208, 100, tma(warps=1, rows=32, esc_early=1, esc_chunk=2),
                 id="32-rows-per-warp-early-escapes"),
])
def test_tma_kernel_gives_the_mma_kernels_bits(m, k, n, config):
    """The TMA kernel against the exact product (2% escapes), and bit-identical to the mma
    kernel on the same tile: the same decoded products in the same order. Its zero-filled boxes
    stand in for the mma kernel's masks past M, past N's last row block and past each half of K
    (K2 = 520 pairs is 16 whole blocks and 8 pairs of padding)."""
    torch.manual_seed(0)
    w = synthetic_weight(n, k, torch.device("cpu"), 0, outlier_rate=2e-2)
    packed = w12.pack(w, order="frag")
    x = torch.randn(m, k).to(torch.bfloat16)
    exact, abs_sum = gemm_exact(x, w)
    out = w12f_gemm.linear(x, packed, config)
    assert check_close("w12f tma", out, exact, abs_sum).ok
    twin = {**config, "kernel": "mma", "num_stages": 1, "PREFETCH": 0, "WGMMA": 0, "ESC_PARTS": 3}
    assert torch.equal(out, w12f_gemm.linear(x, packed, twin))


def test_escape_free_weights_have_no_escapes_and_still_multiply():
    """``synthetic_weight(outlier_rate=None)`` (the probe's ``--outlier-rate none``, for timing a
    GEMM without escape work): every magnitude inside one 16-exponent window, so no escape, a
    bit-exact round trip, and the GEMMs (each row's escape walk empty) match the exact product."""
    w = synthetic_weight(40, 1030, torch.device("cpu"), 3, outlier_rate=None)
    ordinary = synthetic_weight(40, 1030, torch.device("cpu"), 3, outlier_rate=0.0)
    assert w12.pack(ordinary).num_escapes > 0  # N(0, 0.02) alone has tiny magnitudes
    x = torch.randn(5, 1030).to(torch.bfloat16)
    exact, abs_sum = gemm_exact(x, w)
    for order, gemm, config in (("frag", w12f_gemm.linear, mma(warps=1, split=4, prefetch=1)),
                                ("rows", w12_gemm.linear, None)):
        packed = w12.pack(w, order=order)
        assert packed.num_escapes == 0 and packed.escape_rate == 0.0
        assert torch.equal(w12.unpack(packed).view(torch.int16), w.view(torch.int16))
        assert check_close(order, gemm(x, packed, config), exact, abs_sum).ok


def test_default_config_runs_odd_shapes():
    for m, k, n in ((1, 67, 45), (6, 67, 45), (17, 67, 45), (64, 2050, 20)):
        w = synthetic_weight(n, k, torch.device("cpu"), 1)
        x = torch.randn(m, k).to(torch.bfloat16)
        exact, abs_sum = gemm_exact(x, w)
        assert check_close("default", w12f_gemm.linear(x, w12.pack(w, order="frag")), exact,
                           abs_sum).ok


def test_float32_x_refuses_a_pipelined_config():
    """float32 x tiles take twice the shared memory validate budgets for bf16 ones, and the TMA
    kernel's x descriptors are bf16."""
    w = synthetic_weight(20, 128, torch.device("cpu"), 0)
    with pytest.raises(ValueError, match="num_stages 1"):
        w12f_gemm.linear(torch.randn(4, 128), w12.pack(w, order="frag"),
                         mma() | {"num_stages": 2})
    with pytest.raises(ValueError, match="bf16 x tiles"):
        w12f_gemm.linear(torch.randn(4, 128), w12.pack(w, order="frag"), tma())


def test_each_gemm_refuses_the_other_order():
    w = synthetic_weight(20, 64, torch.device("cpu"), 0)
    x = torch.randn(2, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match="pack it with order='frag', or use w12_gemm"):
        w12f_gemm.linear(x, w12.pack(w))
    with pytest.raises(ValueError, match="order='rows', or use w12f_gemm"):
        w12_gemm.linear(x, w12.pack(w, order="frag"))


@pytest.mark.parametrize("config, m, k, message", [
    (mma(warps=2) | {"BLOCK_N": 64}, 4, 512, "unknown config keys"),  # 16 rows per warp
    (mma(bk=128), 4, 399, "dividing the 7 blocks"),
    (gemv(), 2, 512, "cannot run M=2"),
    (mma(block_t=32), 4, 512, "pads M=4"),
    (mma() | {"SPLIT_K": 5}, 4, 512, "SPLIT_K"),
    (mma() | {"num_stages": 3, "BLOCK_K": 256, "BLOCK_T": 64, "num_warps": 8}, 64, 8192,
     "shared memory"),
    (mma(bk=32, chains=4), 4, 512, "even number of 32-pair blocks"),
    (tma(), 4, 520, "multiple of 16"),
    (tma(warps=8, bk=256, block_t=64, rows=32, stages=8), 64, 8192, "shared memory"),
    (tma() | {"PREFETCH": 1}, 4, 512, "unknown config keys"),
    (tma() | {"CHAINS": 4}, 4, 512, "CHAINS"),
    (tma(esc_early=4), 4, 512, "ESC_EARLY"),
    (tma(esc_early=8), 4, 512, "ESC_EARLY"),
    (mma(esc_early=2) | {"ESC_PARTS": 2}, 4, 512, "ESC_PARTS=2 changes the one-hot"),
    (tma() | {"ESC_PARTS": 2}, 4, 512, "unknown config keys"),
])
def test_space_refuses_what_the_kernels_cannot_run(config, m, k, message):
    with pytest.raises(ValueError, match=message):
        space.validate(config, m, 100, k)


def test_tma_pipeline_budgets_num_stages_minus_one_steps():
    """Triton's TMA pipeline holds ``num_stages - 1`` K steps in shared memory (the sm_90a
    compile's allocation): the 2-warp, 32-rows-per-warp, 256-pair, 8-token tile (72 KB a step,
    four planes' box and the x tile) fits on 4 stages (216 KB) and not on 5."""
    config = tma(warps=2, bk=256, block_t=8, rows=32, stages=4)
    space.validate(config, 8, 100, 8192)
    with pytest.raises(ValueError, match="294912 B of shared memory"):
        space.validate({**config, "num_stages": 5}, 8, 100, 8192)


def test_stored_configs_with_the_removed_block_n_stay_usable():
    """The first H200 records stored BLOCK_N (= 16 x num_warps) and had no PREFETCH or CHAINS:
    completing drops the one and adds the others as they ran (0, one chain)."""
    old = {**space._mma(2, 64, 8, decode="int"), "BLOCK_N": 32}
    del old["PREFETCH"], old["CHAINS"]
    with pytest.raises(ValueError, match="unknown config keys"):
        space.validate(old, 4, 34816, 5120)
    done = complete_config(space, old)
    space.validate(done, 4, 34816, 5120)
    assert done["PREFETCH"] == 0 and done["CHAINS"] == 1


def test_every_sweep_config_runs_some_decode_shape():
    shapes = [(5120, 34816), (17408, 5120), (6656, 39936), (19968, 6656)]
    for cfg in space.SWEEP:
        ok = []
        for m in (1, 2, 4, 8, 16, 32, 64):
            for k, n in shapes:
                try:
                    space.validate({**cfg, "DECODE": "int"}, m, n, k)
                    ok.append((m, k))
                except ValueError:
                    pass
        assert ok, cfg


def test_signature_matches_reference_and_the_op_is_tunable():
    params = list(inspect.signature(w12f_triton).parameters)
    assert params == list(inspect.signature(w12f_gemm.w12f_gemm_ref).parameters)
    op = get_op("w12f_gemm")
    case = op.make_case(3, 40, 100, torch.device("cpu"), 0)
    assert case.args[0][1].order == "frag"


_COMPILE = """
import collections, json, re
from specpilot.kernels.w12f_gemm import triton as ft
from specpilot.kernels.common.sass import compile_sm90, disassemble, loops, main_loop, opcode
ptrs = {"x_ptr": "*bf16", "planes_ptr": "*u8", "row_ptr": "*i32", "esc_col_ptr": "*i32",
        "esc_delta_ptr": "*fp32", "out_ptr": "*bf16", "ws_ptr": "*fp32", "lock_ptr": "*i32",
        "esc_bits_ptr": "*i16"}
common = {"W": 2, "FC": 4, "SPLIT_K": 1, "ASM": 1, "ESC_CHUNK": 1, "PDL": True}
out = {}
mma = {"BLOCK_T": 8, "X_F32": False, "CHAINS": 1, "ESC_EARLY": 0, "WGMMA": False}
for name, kernel, extra in (("mma", ft.w12f_fwd_kernel_mma, mma),
                            ("mma-4-chains", ft.w12f_fwd_kernel_mma, {**mma, "CHAINS": 4}),
                            ("mma-32-rows", ft.w12f_fwd_kernel_mma, {**mma, "W": 4}),
                            ("mma-esc-early", ft.w12f_fwd_kernel_mma,
                             {**mma, "ESC_EARLY": 1, "ESC_CHUNK": 4}),
                            ("mma-late-gathers", ft.w12f_fwd_kernel_mma,
                             {**mma, "ESC_EARLY": 2, "ESC_CHUNK": 4}),
                            ("mma-esc-loop", ft.w12f_fwd_kernel_mma,
                             {**mma, "ESC_EARLY": 8, "ESC_CHUNK": 1}),
                            ("mma-esc-mma-3-parts", ft.w12f_fwd_kernel_mma,
                             {**mma, "ESC_EARLY": 4, "ESC_CHUNK": 2}),
                            ("mma-esc-mma-2-parts", ft.w12f_fwd_kernel_mma,
                             {**mma, "ESC_EARLY": 4, "ESC_CHUNK": 2, "ESC_PARTS": 2}),
                            ("gemv", ft.w12f_fwd_kernel_gemv, {})):
    for prefetch in (False, True):
        c = compile_sm90(kernel, {**common, **extra, "PREFETCH": prefetch}, 2, 1, ptrs,
                         ("N", "K", "K2", "stride_xm", "KB"))
        sass = disassemble(c.asm["cubin"])
        body = main_loop(sass)
        # the loops with MMAs but no plane load: ESC_EARLY 4's escape rounds
        rounds = [lp for lp in loops(sass) if any(opcode(i) == "HMMA" for i in lp)
                  and not any("LDG.E.EF.128" in i for i in lp)]
        to_a = [ln for ln in c.asm["ttgir"].splitlines()
                if "convert_layout" in ln and "dot_op<{opIdx = 0" in ln.split("->")[-1]]
        before = c.asm["ptx"].split("griddepcontrol.wait")[0]
        out[name + ("-prefetch" if prefetch else "")] = {
            "converts_to_a": len(to_a),
            "plane_loads": sum(1 for i in body if "LDG.E.EF.128" in i),
            "last_plane_load": max((k for k, i in enumerate(body) if "LDG.E.EF.128" in i),
                                   default=-1),
            "first_x_gather": min((k for k, i in enumerate(body) if "LDG.E.U16" in i),
                                  default=-1),
            "ops": collections.Counter(opcode(i) for i in body),
            "round_ops": [collections.Counter(opcode(i) for i in lp) for lp in rounds],
            "loads_before_wait": re.findall(r"ld\\.global[\\w.:]*", before),
            "x_gather_lines": [i for i, ln in enumerate(c.asm["ptx"].splitlines())
                               if re.search(r"ld\\.global[\\w.:]*\\.b16", ln)],
            "mma_lines": [i for i, ln in enumerate(c.asm["ptx"].splitlines())
                          if "mma.sync" in ln]}
wg = {**mma, "W": 4, "BLOCK_T": 16, "MMA_V2": False, "PREFETCH": True}
for name, labels in (("wgmma", True), ("wgmma-mma-labels", False)):
    c = compile_sm90(ft.w12f_fwd_kernel_mma, {**common, **wg, "WGMMA": labels}, 4, 1, ptrs,
                     ("N", "K", "K2", "stride_xm", "KB"))
    out[name] = {"ops": collections.Counter(opcode(i) for i in
                                            main_loop(disassemble(c.asm["cubin"]))),
                 "warp_group_dots": c.asm["ttgir"].count("ttng.warp_group_dot ")}
tma_ptrs = {**ptrs, "planes_desc": "tensordesc<u8[2, 4, 4, 2, 256]>",
            "x_desc": "tensordesc<bf16[8, 2, 128]>"}
tma = {**common, "BLOCK_T": 8, "CHAINS": 2, "ESC_EARLY": 0, "MMA_V2": False}
c = compile_sm90(ft.w12f_fwd_kernel_tma, tma, 2, 3, tma_ptrs, ("N", "stride_xm", "KB"))
sass = disassemble(c.asm["cubin"])
out["tma"] = {"ops": collections.Counter(i.split()[1] if i.startswith("@") else i.split()[0]
                                         for i in sass),
              "converts_to_a": sum(1 for ln in c.asm["ttgir"].splitlines()
                                   if "convert_layout" in ln
                                   and "dot_op<{opIdx = 0" in ln.split("->")[-1])}
print(json.dumps(out))
"""


@functools.cache
def compiled() -> dict:
    """What the sm_90a compiles of :data:`_COMPILE` hold, compiled once per session in a child
    process (this directory runs under the interpreter)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_planes_go_from_global_memory_to_the_mma_without_conversion():
    """sm_90a compile (a child process: this directory runs under the interpreter) of the 2-warp,
    128-pair tile: each thread loads 3 planes x 4 chunks with 16-byte evict-first loads, the A
    operand needs no convert_layout, and no plane byte passes through shared memory (only the x
    tiles do: one STS per x tile chunk); the GEMV's K loop moves no data between lanes. With
    ``PREFETCH`` the first K step's 12 plane loads (and nothing else; with 4 accumulator chains
    the first sub-step's 6) come before the PDL wait, and the K loop is the same; without it
    nothing is read before the wait. Two row blocks per warp double the planes and MMAs per warp
    with no conversion and no more x tile stores. Early escapes read only weight data before the
    wait; with late gathers (``ESC_EARLY`` 2) their x values are read after the K loop."""
    got = compiled()
    for name, first in (("mma", 12), ("mma-4-chains", 6), ("gemv", 12)):
        assert got[name]["loads_before_wait"] == []
        early = got[name + "-prefetch"]["loads_before_wait"]
        assert len(early) == first and all("evict_first" in ld and ld.endswith(".v4.b32")
                                           for ld in early), early
        assert got[name + "-prefetch"]["plane_loads"] == 12 == got[name]["plane_loads"]
        assert got[name + "-prefetch"]["ops"].get("HMMA", 0) == got[name]["ops"].get("HMMA", 0)
    assert got["mma-4-chains"]["ops"]["HMMA"] == 16 and got["mma-4-chains"]["converts_to_a"] == 0
    mma_ops, gemv_ops = (collections.Counter(got[k]["ops"]) for k in ("mma", "gemv"))
    assert got["mma"]["converts_to_a"] == 0 and got["mma-prefetch"]["converts_to_a"] == 0
    assert got["mma"]["plane_loads"] == 12 and got["gemv"]["plane_loads"] == 12
    # two 16-row blocks per warp (W = 4 on 2 warps): twice the planes and MMAs per warp, still
    # no conversion, and the x tiles shared by both blocks (no more STS)
    rows32 = collections.Counter(got["mma-32-rows"]["ops"])
    assert got["mma-32-rows"]["converts_to_a"] == 0 and got["mma-32-rows"]["plane_loads"] == 24
    assert rows32["HMMA"] == 32 and rows32["STS"] == mma_ops["STS"]
    # early escapes: only 32-bit weight-side loads (escape ranges, columns, deltas) before the
    # wait, and with PREFETCH the 12 plane loads as well; the K loop keeps its loads and MMAs and
    # grows by at most 10% (the early sum stays live across it)
    early = got["mma-esc-early"]["loads_before_wait"]
    assert early and all(".b32" in ld and "v4" not in ld for ld in early), early
    early_pf = got["mma-esc-early-prefetch"]["loads_before_wait"]
    assert sum("evict_first" in ld for ld in early_pf) == 12
    esc_ops = collections.Counter(got["mma-esc-early"]["ops"])
    assert got["mma-esc-early"]["plane_loads"] == 12 and esc_ops["HMMA"] == mma_ops["HMMA"]
    assert sum(esc_ops.values()) <= 1.1 * sum(mma_ops.values())
    # late gathers (ESC_EARLY 2): the same weight-side loads before the wait, and every x gather
    # after the K loop's last MMA (early: the first one before the loop's first MMA)
    late = got["mma-late-gathers"]
    assert late["loads_before_wait"] == got["mma-esc-early"]["loads_before_wait"]
    assert late["x_gather_lines"] and min(late["x_gather_lines"]) > max(late["mma_lines"])
    assert min(got["mma-esc-early"]["x_gather_lines"]) < min(got["mma-esc-early"]["mma_lines"])
    assert late["plane_loads"] == 12 and late["ops"]["HMMA"] == mma_ops["HMMA"]
    assert mma_ops["HMMA"] == 16 and mma_ops["STS"] <= 4
    assert gemv_ops["SHFL"] == 0 and gemv_ops["FFMA"] >= 64


def test_escape_rounds_run_inside_the_k_loop_under_its_plane_loads():
    """``ESC_EARLY`` 8 compiled for sm_90a (2 warps x 128 pairs, 32-slot rounds): the K loop
    holds a round (its x gathers and its one-hot MMAs beside the step's 16) issued after all 12
    of the step's plane loads, so the round's loads and arithmetic run while the planes are in
    flight; the rounds the loop had no step for run in a loop of their own after it."""
    got = compiled()
    plain = collections.Counter(got["mma"]["ops"])
    for name in ("mma-esc-loop", "mma-esc-loop-prefetch"):
        ops = collections.Counter(got[name]["ops"])
        assert got[name]["plane_loads"] == 12 and got[name]["converts_to_a"] == 0
        [after] = got[name]["round_ops"]
        assert ops["HMMA"] == plain["HMMA"] + collections.Counter(after)["HMMA"] > plain["HMMA"]
        assert 0 <= got[name]["last_plane_load"] < got[name]["first_x_gather"], got[name]


def test_two_part_escape_rounds_take_fewer_instructions():
    """``ESC_PARTS`` 2 against 3 on ``ESC_EARLY`` 4's 64-slot rounds (sm_90a, 2 warps x 128
    pairs x 8 tokens): two one-hot MMAs a round instead of three and no fp32 product to split
    (no ``F2F`` conversions), at most 70% of the round's instructions (51% when written: 692 ->
    355)."""
    got = compiled()
    for prefetch in ("", "-prefetch"):
        three, two = (got[f"mma-esc-mma-{n}-parts{prefetch}"] for n in (3, 2))
        [r3], [r2] = (map(collections.Counter, x["round_ops"]) for x in (three, two))
        assert r2["HMMA"] < r3["HMMA"] and r2["F2F"] == 0 < r3["F2F"]
        assert sum(r2.values()) <= 0.7 * sum(r3.values()), (r2, r3)


def test_wgmma_labels_keep_the_planes_in_their_lanes():
    """sm_90a compile of the 4-warp, 16-token, 128-pair tile with ``MMA_V2`` 0 (Triton emits
    ``wgmma`` with the decoded A operand in registers and x in shared memory): in wgmma's column
    labels (``WGMMA`` 1) the K loop moves no plane byte between lanes and reads no x fragment
    back from shared memory; in the mma.sync labels the A operand needs cross-lane shuffles."""
    got = compiled()
    wgmma, other = (collections.Counter(got[k]["ops"]) for k in ("wgmma", "wgmma-mma-labels"))
    assert got["wgmma"]["warp_group_dots"] >= 2 and wgmma["HGMMA"] == 16
    assert wgmma["SHFL"] == 0 and wgmma["LDS"] == 0 and wgmma["HMMA"] == 0
    assert wgmma["LDG"] == 16  # 12 plane loads, 4 x tile loads
    assert other["HGMMA"] == 16 and other["SHFL"] >= 32


def test_tma_kernel_reads_planes_from_shared_memory_in_the_a_layout():
    """sm_90a compile of the TMA kernel (2 warps x 128 pairs, 3 stages): the planes and x tiles
    arrive by TMA (one 5-D box for the three planes and one 3-D box for both x halves, for each
    stage in flight), no plane is read from global memory by the threads, and each thread takes
    its share of a stage's planes out of shared memory as 16-byte loads (3 planes x 4 chunks: not
    the box's zero-filled fourth) straight into the A operand's layout: no convert_layout, no
    spilled registers."""
    ops = collections.Counter(compiled()["tma"]["ops"])
    assert ops["UTMALDG.5D"] >= 2 and ops["UTMALDG.5D"] == ops["UTMALDG.3D"]
    assert ops["UTMALDG.2D"] == 0
    assert ops["LDS.128"] == 12 and ops["LDG.E.EF.128"] == 0
    assert compiled()["tma"]["converts_to_a"] == 0
    assert ops["STL"] == ops["LDL"] == 0 and ops["HMMA.16816.F32.BF16"] == 16
