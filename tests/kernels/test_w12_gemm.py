"""w12_gemm: Triton (interpreter) against the fp64 exact result of the unpacked weight."""

import dataclasses
import inspect

import pytest
import torch

from specpilot.kernels import w12
from specpilot.kernels import w12_gemm
from specpilot.kernels.common.check import assert_gemm_close
from specpilot.kernels.common.check import check_close
from specpilot.kernels.common.check import gemm_exact
from specpilot.kernels.tuning.ops import synthetic_weight
from specpilot.kernels.w12_gemm import space as w12_space
from specpilot.kernels.w12_gemm.reference import w12_gemm_ref
from specpilot.kernels.w12.triton import window_scale
from specpilot.kernels.w12_gemm.triton import w12_gemm as w12_gemm_triton


def gemv(bn=16, bk=16, split=1, esc=1, k_stages=1, early=1):
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 1,
            "num_stages": 1, "DECODE": "int", "ESC_CHUNK": esc, "K_STAGES": k_stages,
            "ESC_EARLY": early, "L2_PREFETCH": 0}


def dot(bn=16, bk=16, split=1, warps=4, esc=1, prefetch=0, block_t=0, mma_v2=0, t_min=16):
    return {"kernel": "dot", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
            "num_stages": 2, "DECODE": "int", "ESC_CHUNK": esc, "PREFETCH": prefetch,
            "L2_PREFETCH": 0, "BLOCK_T": block_t, "MMA_V2": mma_v2, "BLOCK_T_MIN": t_min}


def streamk(bn=8, bk=16, programs=None, esc=1):
    cfg = {"kernel": "gemv_sk", "BLOCK_N": bn, "BLOCK_K": bk, "PROGRAMS_PER_SM": 2, "MAX_REGS": 0,
           "num_warps": 1, "num_stages": 1, "DECODE": "int", "ESC_CHUNK": esc, "PDL": 0}
    return cfg if programs is None else {**cfg, "_test_programs": programs}


def dot_sk(bn=16, bk=16, warps=1, programs=None, esc=1, t_min=16):
    cfg = {"kernel": "dot_sk", "BLOCK_N": bn, "BLOCK_K": bk, "PROGRAMS_PER_SM": 2, "MAX_REGS": 0,
           "num_warps": warps, "num_stages": 2, "DECODE": "int", "ESC_CHUNK": esc, "PDL": 0,
           "BLOCK_T_MIN": t_min}
    return cfg if programs is None else {**cfg, "_test_programs": programs}


CASES = [
    pytest.param(1, 67, 45, gemv(), id="M1-K67-N45-w12-gemv"),
    pytest.param(1, 67, 45, gemv(bn=8, split=3), id="M1-K67-N45-w12-gemv-split3"),
    pytest.param(1, 67, 45, gemv(bn=8, split=3, early=0), id="M1-K67-N45-w12-gemv-split3-late"),
    pytest.param(1, 200, 45, gemv(bn=8, k_stages=3), id="M1-K200-N45-w12-gemv-pipelined"),
    # ESC_EARLY peels two K steps, so the launcher turns it off where a split has fewer: K2 = 10,
    # less than one step; K2 = 20, one step and a tail; four rows.
    pytest.param(1, 20, 45, gemv(bn=4, esc=2), id="M1-K20-N45-w12-gemv-one-partial-step"),
    pytest.param(1, 40, 45, gemv(bn=4, esc=4), id="M1-K40-N45-w12-gemv-step-and-tail"),
    # Several pair blocks (K = 1152: K2 = 576, nine 64-pair blocks; 1031: 516 in nine, the last
    # padded), split across blocks; 45 rows in 32- and 64-row tiles read clamped rows past 48.
    pytest.param(1, 1152, 45, gemv(bn=32, bk=64, split=4),
                 id="M1-K1152-N45-w12-gemv-blocks-split4"),
    pytest.param(1, 1031, 45, gemv(bn=64, bk=32, split=3, esc=2, k_stages=2),
                 id="M1-K1031-N45-w12-gemv-blocks-tail-split3"),
    pytest.param(1, 1031, 45, streamk(bn=16, bk=64, programs=5),
                 id="M1-K1031-N45-w12-streamk-blocks"),
    pytest.param(5, 1152, 45, dot(bn=64, bk=64, split=2), id="M5-K1152-N45-w12-dot-blocks-split2"),
    # K2 = 100 in splits of 64 pairs: the last one two peeled steps, no loop, a tail of 4 pairs.
    pytest.param(1, 200, 45, gemv(bn=8, split=2, k_stages=2),
                 id="M1-K200-N45-w12-gemv-split2-peeled-tail"),
    pytest.param(1, 66, 45, dot(), id="M1-K66-N45-w12-dot"),
    # Stream-K, 6 tiles x 3 steps (the last one a masked tail): 2 slots per SM x 132 SMs, one
    # program per step (every tile summed from three partials); 4 slots: one data-parallel round,
    # then 2 tiles' steps shared 2 each (ranges ending inside a tile and starting inside the next,
    # both workspace slots); 7: every program one whole tile; 1: all data-parallel.
    pytest.param(1, 67, 45, streamk(), id="M1-K67-N45-w12-streamk-per-step"),
    pytest.param(1, 67, 45, streamk(programs=4), id="M1-K67-N45-w12-streamk-4"),
    pytest.param(1, 67, 45, streamk(programs=7), id="M1-K67-N45-w12-streamk-7"),
    pytest.param(1, 67, 45, streamk(programs=1), id="M1-K67-N45-w12-streamk-1"),
    pytest.param(1, 128, 40, streamk(bn=16, programs=5), id="M1-K128-N40-w12-streamk-no-tail"),
    # 5 tiles x 7 steps: 2 slots, two data-parallel rounds, then one tile shared (slot 0); 3
    # slots, one round, then 2 tiles' 14 steps over 3 programs (both slots, 2 and 3 partials).
    pytest.param(1, 200, 40, streamk(programs=2), id="M1-K200-N40-w12-streamk-rounds"),
    pytest.param(1, 200, 40, streamk(programs=3), id="M1-K200-N40-w12-streamk-round-shared"),
    pytest.param(3, 67, 45, dot(), id="M3-K67-N45-w12-dot"),
    pytest.param(3, 67, 45, dot(mma_v2=1), id="M3-K67-N45-w12-dot-mma-v2"),
    # token tiles below 16 (BLOCK_T_MIN): 3 tokens in a tile of 4, 5 in one of 8 (3 padding rows)
    pytest.param(3, 67, 45, dot(t_min=4), id="M3-K67-N45-w12-dot-4-token-tile"),
    pytest.param(5, 67, 45, dot(t_min=8, split=2), id="M5-K67-N45-w12-dot-8-token-tile-split2"),
    pytest.param(5, 67, 45, dot_sk(programs=5, t_min=8), id="M5-K67-N45-w12-dot-sk-8-token-tile"),
    # the GEMV for 2 rows (each weight decoded once for both), split
    # across pair blocks with escapes on split 0, pipelined; ESC_EARLY is for M == 1 only
    pytest.param(2, 1152, 45, gemv(bn=8, bk=64, split=4), id="M2-K1152-N45-w12-gemv-rows-split4"),
    pytest.param(2, 200, 45, gemv(bn=8, k_stages=3), id="M2-K200-N45-w12-gemv-rows-piped"),
    pytest.param(2, 67, 45, gemv(bn=4, esc=2), id="M2-K67-N45-w12-gemv-rows-esc2"),
    pytest.param(16, 128, 64, dot(bn=32, bk=32, split=2), id="M16-K128-N64-w12-dot-split2"),
    pytest.param(17, 67, 45, dot(split=2), id="M17-K67-N45-w12-dot-split2"),
    pytest.param(70, 35, 20, dot(), id="M70-K35-N20-w12-dot"),
    # M split into token tiles (BLOCK_T): 40 rows as 16 + 16 + 8 with two K splits (each token
    # tile's own split-K counter), 70 as 32 + 32 + 6 over two row tiles.
    pytest.param(40, 1152, 45, dot(bn=32, bk=64, split=2, block_t=16),
                 id="M40-K1152-N45-w12-dot-token-tiles16-split2"),
    # more row tiles (7) than token tiles (3) under split-K: a split-K counter indexed the old
    # way (token tile * row tiles + row tile, with the grid's axes swapped) would be shared
    pytest.param(40, 130, 200, dot(bn=32, split=2, block_t=16),
                 id="M40-K130-N200-w12-dot-token-tiles16-split2-7-row-tiles"),
    pytest.param(70, 67, 45, dot(bn=32, block_t=32), id="M70-K67-N45-w12-dot-token-tiles32"),
    # BLOCK_N = 16 x num_warps (the mma.sync shape); K2 = 48: three whole steps, no tail.
    pytest.param(5, 96, 40, dot(bn=32, warps=2), id="M5-K96-N40-w12-dot-2warps-no-tail"),
    # The first K step's tiles loaded before the PDL wait: splits of one step each (K2 = 34 in
    # 16-pair splits: 16, 16 and a 2-pair tail), several pair blocks, and K2 = 10: one partial
    # step.
    pytest.param(17, 67, 45, dot(split=3, prefetch=1), id="M17-K67-N45-w12-dot-split3-prefetch"),
    pytest.param(5, 1152, 45, dot(bn=64, bk=64, split=2, prefetch=1),
                 id="M5-K1152-N45-w12-dot-blocks-split2-prefetch"),
    pytest.param(3, 20, 45, dot(prefetch=1), id="M3-K20-N45-w12-dot-one-partial-step-prefetch"),
    # The swap-AB kernel under stream-K: 3 row tiles x 3 steps (K2 = 34, the last step a masked
    # tail). 2 slots: one data-parallel round, then the third tile's steps shared 2 + 1; 5 slots:
    # no round, 2 steps each, so program 1 ends tile 0 and starts tile 1 (both workspace slots);
    # 264 (2 per SM): one step per program, every tile summed from three partials.
    pytest.param(5, 67, 45, dot_sk(programs=2), id="M5-K67-N45-w12-dot-sk-round-shared"),
    pytest.param(5, 67, 45, dot_sk(programs=5, esc=2), id="M5-K67-N45-w12-dot-sk-spans-tiles"),
    pytest.param(3, 67, 45, dot_sk(), id="M3-K67-N45-w12-dot-sk-per-step"),
    # 16 rows, pair blocks (K2 = 576: 9 steps of 64), 2 row tiles over 3 programs; 40 rows in one
    # 64-token tile.
    pytest.param(16, 1152, 45, dot_sk(bn=32, bk=64, warps=2, programs=3),
                 id="M16-K1152-N45-w12-dot-sk-blocks"),
    pytest.param(40, 67, 45, dot_sk(programs=4), id="M40-K67-N45-w12-dot-sk-token-tile64"),
]


def _inputs(m, k, n, seed=0, outlier_rate=0.02):
    w = synthetic_weight(n, k, torch.device("cpu"), seed, outlier_rate=outlier_rate)
    x = torch.randn((m, k), generator=torch.Generator().manual_seed(seed + 7)).to(torch.bfloat16)
    return x, w, w12.pack(w)


@pytest.mark.parametrize("m, k, n, config", CASES)
def test_triton(m, k, n, config):
    x, w, packed = _inputs(m, k, n)
    assert packed.num_escapes > 0
    assert_gemm_close("w12_gemm", w12_gemm_triton(x, packed, config=config), x, w)
    out32 = w12_gemm_triton(x, packed, out_dtype=torch.float32, config=config)
    assert_gemm_close("w12_gemm fp32 out", out32, x, w)


@pytest.mark.parametrize("m, k, n, split", [(17, 67, 45, 3), (5, 1152, 45, 2)])
def test_dot_prefetch_gives_the_same_bits(m, k, n, split):
    """Loading the first K step before the PDL wait changes where the loads sit, not the sums."""
    x, _, packed = _inputs(m, k, n)
    plain = w12_gemm_triton(x, packed, config=dot(split=split))
    early = w12_gemm_triton(x, packed, config=dot(split=split, prefetch=1))
    assert torch.equal(plain.view(torch.int16), early.view(torch.int16))


@pytest.mark.parametrize("config", [gemv(), gemv(early=0), dot(), dot(prefetch=1),
                                    dot_sk(programs=5)],
                         ids=["gemv", "gemv-late", "dot", "dot-prefetch", "dot-sk"])
def test_dropping_escape_corrections_is_caught(config):
    """Without the epilogue's escape terms the result is wrong: the check must see it."""
    m = 1 if config["kernel"] == "gemv" else 4
    x, w, packed = _inputs(m, 67, 45)
    broken = dataclasses.replace(packed, esc_delta=torch.zeros_like(packed.esc_delta))
    exact, abs_sum = gemm_exact(x, w)
    assert not check_close("no escapes", w12_gemm_triton(x, broken, config=config), exact,
                           abs_sum).ok


@pytest.mark.parametrize("esc", [1, 2, 4, 8])
def test_high_escape_rate_tensor(esc):
    """Rows with many escapes (more than one chunk, and a partial last chunk), in chunks of
    ``esc``."""
    gen = torch.Generator().manual_seed(5)
    w = (torch.exp2(torch.rand((24, 40), generator=gen) * 40 - 30)
         * torch.randn((24, 40), generator=gen).sign()).to(torch.bfloat16)
    packed = w12.pack(w)
    assert packed.escape_rate > 0.3
    x = torch.randn((5, 40), generator=gen).to(torch.bfloat16)
    assert_gemm_close("w12 high escape", w12_gemm_triton(x, packed, config=dot(esc=esc)), x, w)
    for early in (0, 1):
        assert_gemm_close("w12 high escape gemv",
                          w12_gemm_triton(x[:1], packed, config=gemv(esc=esc, early=early)),
                          x[:1], w)


@pytest.mark.parametrize("exp2", [126, -110], ids=["window-near-254", "window-near-0"])
def test_window_at_the_exponent_extremes(exp2):
    """The GEMMs decode with a constant exponent offset C0 and scale the sums by 2^(base - C0):
    windows whose scale is far from 1 must still give the exact product."""
    gen = torch.Generator().manual_seed(3)
    w = (torch.randn((24, 40), generator=gen) * 2.0**exp2).to(torch.bfloat16)
    packed = w12.pack(w)
    assert packed.base >= 236 if exp2 > 0 else packed.base <= 20
    x = (torch.randn((3, 40), generator=gen) * 2.0**-20).to(torch.bfloat16)  # sums stay finite
    exact, abs_sum = gemm_exact(x, w)
    for config in (dot(), gemv()):
        xi = x if config["kernel"] == "dot" else x[:1]
        out = w12_gemm_triton(xi, packed, out_dtype=torch.float32, config=config)
        res = check_close(f"w12 2^{exp2}", out, exact[:len(xi)], abs_sum[:len(xi)])
        assert res.ok, str(res)


@pytest.mark.parametrize("fill", [0.0, float("inf"), float("nan")], ids=["zeros", "inf", "nan"])
def test_zeros_and_non_finite_weights_are_always_escapes(fill):
    """Exponents 0 and 255 never sit in the window (its base is in [1, 239]), so an all-zero,
    all-inf or all-NaN tensor is all escapes and comes out exact (the base-free decode would read
    an in-window exponent 0 or 255 as a normal number)."""
    assert window_scale(1) == 2.0**-111 and window_scale(239) == 2.0**127
    with pytest.raises(ValueError, match="outside \\[1, 239\\]"):
        window_scale(240)
    w = torch.full((8, 32), fill, dtype=torch.bfloat16)
    packed = w12.pack(w)
    assert 1 <= packed.base <= 239 and packed.num_escapes == w.numel()
    assert torch.equal(packed.unpack().view(torch.int16), w.view(torch.int16))
    x = torch.rand((2, 32), generator=torch.Generator().manual_seed(1)).to(torch.bfloat16) + 0.5
    expect = x.float() @ w.float().T  # zeros, +inf, NaN
    for config in (dot(), gemv()):
        xi = x if config["kernel"] == "dot" else x[:1]
        out = w12_gemm_triton(xi, packed, out_dtype=torch.float32, config=config)
        torch.testing.assert_close(out, expect[:len(xi)], equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("m, config", [(1, gemv()), (5, dot(bn=32, warps=2)),
                                       (5, dot_sk(programs=5))],
                         ids=["gemv", "dot", "dot-sk"])
def test_float32_activations(m, config):
    """The float32 validation twin runs W12 with float32 x: same decode and escapes, float32
    products (an IEEE float32 dot in the swap-AB kernel), float32 out."""
    x, w, packed = _inputs(m, 67, 45)
    x32 = torch.randn((m, 67), generator=torch.Generator().manual_seed(9))
    exact, abs_sum = gemm_exact(x32, w)
    for cfg in (config, None):  # None: the space default (tuned entries are bf16 timings)
        out = w12_gemm_triton(x32, packed, config=cfg)
        assert out.dtype == torch.float32
        res = check_close("w12 float32 x", out, exact, abs_sum)
        assert res.ok, str(res)
    with pytest.raises(TypeError, match="bf16 \\(or float32\\) x"):
        w12_gemm_triton(x32.double(), packed)


def test_reference_and_linear():
    x, w, packed = _inputs(2, 40, 24)
    assert_gemm_close("w12_gemm_ref", w12_gemm_ref(x, packed), x, w)
    assert_gemm_close("linear", w12_gemm.linear(x, packed), x, w)
    assert_gemm_close("linear M=1", w12_gemm.linear(x[:1], packed), x[:1], w)


def test_signature_matches_reference():
    assert inspect.signature(w12_gemm_triton) == inspect.signature(w12_gemm_ref)


def test_shape_errors():
    x, _, packed = _inputs(2, 40, 24)
    with pytest.raises(ValueError, match="2-D"):
        w12_gemm_triton(x[:, :39], packed, config=dot())
    with pytest.raises(ValueError, match="inline PTX"):
        w12_gemm_triton(x, packed, config={**dot(), "DECODE": "prmt"})
    with pytest.raises(ValueError, match="inline PTX"):
        w12_gemm_triton(x[:1], packed, config={**gemv(), "DECODE": "prmt-bf16"})
    with pytest.raises(ValueError, match="DECODE"):  # the swap-AB kernel has no widening
        w12_gemm_triton(x, packed, config={**dot(), "DECODE": "prmt-bf16"})
    with pytest.raises(ValueError, match="L2_PREFETCH > 0 is inline PTX"):
        w12_gemm_triton(x[:1], packed, config={**gemv(), "L2_PREFETCH": 2})
    # a token tile must split M: at M = 16 one 16-token tile already covers it (BLOCK_T = 0)
    x16, _, packed16 = _inputs(16, 40, 24)
    with pytest.raises(ValueError, match="BLOCK_T=16 does not split M=16"):
        w12_gemm_triton(x16, packed16, config=dot(block_t=16))
    with pytest.raises(ValueError, match="BLOCK_T"):
        w12_gemm_triton(x16, packed16, config=dot(block_t=8))
    # a token tile below 16 pads only M below 16
    with pytest.raises(ValueError, match="BLOCK_T_MIN=8 pads only M below 16, not M=16"):
        w12_gemm_triton(x16, packed16, config=dot(t_min=8))


def test_gemv_rows_take_strided_x():
    """The W12 GEMV for 2 rows reads each row at x's row stride."""
    _, w, packed = _inputs(2, 67, 45)
    wide = torch.randn((2, 80), generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    x = wide[:, 5:72]
    out = w12_gemm_triton(x, packed, config=gemv(bn=8))
    assert_gemm_close("w12 gemv strided x", out, x, w)


def test_swap_ab_row_tiles_must_fit_the_grid_axis():
    """The swap-AB kernel's row tiles are grid axis 1 (CUDA: at most 65535): a config with more is
    a clear error before any launch."""
    from specpilot.kernels.w12_gemm import space

    space.validate(dot(bn=16), 16, 16 * 65535, 64)
    with pytest.raises(ValueError, match="row tiles at N=1048577"):
        space.validate(dot(bn=16), 16, 1048577, 64)


def test_stream_k_swap_ab_runs_one_token_tile():
    """dot_sk covers M <= 64 (one token tile); past that the space refuses it by name."""
    assert "dot_sk" in w12_space.kernels_for(64)
    w12_space.validate(dot_sk(), 64, 45, 67)
    with pytest.raises(ValueError, match="'dot_sk' cannot run M=65"):
        w12_space.validate(dot_sk(), 65, 45, 67)


def test_every_sweep_config_is_valid_at_an_m_it_is_for():
    """The H200 sweep skips a config its space refuses: each entry must be valid somewhere (the
    PTX choices swapped for their interpreter twins, which the validation here runs under)."""
    for config in w12_space.SWEEP:
        cpu = {**config, "DECODE": "int", **({"PDL": 0} if "PDL" in config else {}),
               **({"L2_PREFETCH": 0} if "L2_PREFETCH" in config else {})}
        if config["kernel"] in ("gemv", "gemv_sk"):
            m = 1
        elif config.get("BLOCK_T"):
            m = 2 * config["BLOCK_T"] + 1
        else:
            m = 4 if config.get("BLOCK_T_MIN", 16) < 16 else 16
        w12_space.validate(cpu, m, 5120, 5120)
