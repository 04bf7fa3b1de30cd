"""skinny_gemm: Triton (interpreter) against the fp64 exact result, on odd shapes."""

import inspect
import math

import pytest
import torch

from specpilot.kernels import skinny_gemm
from specpilot.kernels.common.check import assert_gemm_close
from specpilot.kernels.common.launch import lock_buffer
from specpilot.kernels.skinny_gemm import space
from specpilot.kernels.skinny_gemm.reference import skinny_gemm_ref
from specpilot.kernels.skinny_gemm.triton import skinny_gemm as skinny_gemm_triton


def gemv(bn=16, bk=32, split=1, k_stages=1):
    return {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 1,
            "num_stages": 1, "K_STAGES": k_stages, "L2_PREFETCH": 0}


def dot(bn=16, bk=16, split=1, prefetch=0, mma_v2=0, t_min=16):
    return {"kernel": "dot", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4,
            "num_stages": 2, "PREFETCH": prefetch, "L2_PREFETCH": 0, "MMA_V2": mma_v2,
            "BLOCK_T_MIN": t_min}


def tma(bn=32, bk=16, split=1, mma_v2=0, t_min=16):
    return {"kernel": "tma", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4,
            "num_stages": 2, "MMA_V2": mma_v2, "BLOCK_T_MIN": t_min}


def streamk(bn=8, bk=16, programs=None):
    cfg = {"kernel": "gemv_sk", "BLOCK_N": bn, "BLOCK_K": bk, "PROGRAMS_PER_SM": 2, "MAX_REGS": 0,
           "num_warps": 1, "num_stages": 1, "PDL": 0}
    return cfg if programs is None else {**cfg, "_test_programs": programs}


def dot_sk(bn=32, bk=16, programs=None):
    cfg = {"kernel": "dot_sk", "BLOCK_N": bn, "BLOCK_K": bk, "PROGRAMS_PER_SM": 2, "MAX_REGS": 0,
           "num_warps": 4, "num_stages": 2, "PDL": 0, "MMA_V2": 0, "BLOCK_T_MIN": 16}
    return cfg if programs is None else {**cfg, "_test_programs": programs}


def tma_sk(bn=32, bk=16, programs=None, mma_v2=0, t_min=16):
    cfg = {"kernel": "tma_sk", "BLOCK_N": bn, "BLOCK_K": bk, "PROGRAMS_PER_SM": 2,
           "num_warps": 4, "num_stages": 3, "MMA_V2": mma_v2, "BLOCK_T_MIN": t_min}
    return cfg if programs is None else {**cfg, "_test_programs": programs}


CASES = [
    pytest.param(1, 67, 45, gemv(), id="M1-K67-N45-bf16-gemv"),
    pytest.param(1, 67, 45, gemv(bn=8, bk=16, split=4), id="M1-K67-N45-bf16-gemv-split4"),
    pytest.param(1, 200, 45, gemv(bn=8, bk=16, k_stages=3), id="M1-K200-N45-bf16-gemv-pipelined"),
    pytest.param(1, 67, 45, dot(), id="M1-K67-N45-bf16-dot"),
    pytest.param(5, 67, 45, dot(mma_v2=1), id="M5-K67-N45-bf16-dot-mma-v2"),
    pytest.param(5, 67, 45, dot(t_min=8, split=2), id="M5-K67-N45-bf16-dot-8-token-tile"),
    pytest.param(3, 67, 45, dot(t_min=4), id="M3-K67-N45-bf16-dot-4-token-tile"),
    # Stream-K, 6 tiles x 5 K steps (the last one masked): one program per step; 4 slots (a
    # data-parallel round, then 2 tiles shared: both workspace slots); 7 (each program one whole
    # tile); 11 (no round, 2-3 partials per tile); 1 (all data-parallel).
    pytest.param(1, 67, 45, streamk(), id="M1-K67-N45-bf16-streamk-per-step"),
    pytest.param(1, 67, 45, streamk(programs=4), id="M1-K67-N45-bf16-streamk-4"),
    pytest.param(1, 67, 45, streamk(programs=7), id="M1-K67-N45-bf16-streamk-7"),
    pytest.param(1, 67, 45, streamk(programs=1), id="M1-K67-N45-bf16-streamk-1"),
    pytest.param(1, 67, 45, streamk(programs=11), id="M1-K67-N45-bf16-streamk-11"),
    pytest.param(1, 200, 40, streamk(programs=2), id="M1-K200-N40-bf16-streamk-rounds"),
    pytest.param(1, 200, 40, streamk(programs=3), id="M1-K200-N40-bf16-streamk-round-shared"),
    pytest.param(3, 67, 45, dot(), id="M3-K67-N45-bf16-dot"),
    # the GEMV for 2 rows, split and pipelined
    pytest.param(2, 67, 45, gemv(bn=8, bk=16, split=3), id="M2-K67-N45-bf16-gemv-rows-split3"),
    pytest.param(2, 200, 45, gemv(bn=8, bk=16, k_stages=3),
                 id="M2-K200-N45-bf16-gemv-rows-piped"),
    pytest.param(16, 128, 64, dot(bn=32, bk=32, split=2), id="M16-K128-N64-bf16-dot-split2"),
    pytest.param(17, 67, 45, dot(bn=32, bk=16, split=3), id="M17-K67-N45-bf16-dot-split3"),
    pytest.param(64, 33, 20, dot(), id="M64-K33-N20-bf16-dot"),
    pytest.param(70, 67, 45, dot(split=2), id="M70-K67-N45-bf16-dot-split2"),
    pytest.param(17, 67, 45, dot(bn=32, bk=16, split=3, prefetch=1),
                 id="M17-K67-N45-bf16-dot-split3-prefetch"),
    pytest.param(3, 10, 45, dot(prefetch=1), id="M3-K10-N45-bf16-dot-one-partial-step-prefetch"),
    # The swap-AB kernel under stream-K: 2 row tiles x 5 K steps (the last masked). 1 slot: all
    # data-parallel; 3: no round, 4 steps each (a range ending inside one tile and starting
    # inside the next: both workspace slots); 264 (2 per SM): one step per program. 64 rows in
    # one token tile.
    pytest.param(5, 67, 45, dot_sk(programs=1), id="M5-K67-N45-bf16-dot-sk-1"),
    pytest.param(5, 67, 45, dot_sk(programs=3), id="M5-K67-N45-bf16-dot-sk-spans-tiles"),
    pytest.param(16, 67, 45, dot_sk(), id="M16-K67-N45-bf16-dot-sk-per-step"),
    pytest.param(64, 67, 45, dot_sk(programs=3), id="M64-K67-N45-bf16-dot-sk-token-tile64"),
    # TMA copies (K a multiple of 8): rows past N and M, and the K tail, arrive as zeros
    pytest.param(1, 200, 45, tma(), id="M1-K200-N45-bf16-tma"),
    pytest.param(3, 200, 45, tma(split=3), id="M3-K200-N45-bf16-tma-split3"),
    pytest.param(5, 72, 45, tma(t_min=8, mma_v2=1), id="M5-K72-N45-bf16-tma-8-token-tile"),
    pytest.param(17, 200, 45, tma(bn=64, bk=32, split=2), id="M17-K200-N45-bf16-tma-split2"),
    pytest.param(70, 64, 33, tma(), id="M70-K64-N33-bf16-tma-token-tiles"),
    # The TMA tiles under stream-K, one flat loop per program, 2 row tiles x 5 K steps (the last
    # half past K): 1 slot (both tiles data-parallel in one loop, a tile boundary inside it); 3
    # (no round, 4 steps each, one range ending inside a tile and going on in the next); 4; the
    # default (one step per program); 3 tiles on 2 slots (a round, then the third tile shared:
    # the loop goes from whole tiles to a segment); 64 rows in one token tile.
    pytest.param(5, 72, 45, tma_sk(programs=1), id="M5-K72-N45-bf16-tma-sk-1"),
    pytest.param(5, 72, 45, tma_sk(programs=3), id="M5-K72-N45-bf16-tma-sk-spans-tiles"),
    pytest.param(3, 72, 45, tma_sk(programs=4, t_min=8, mma_v2=1),
                 id="M3-K72-N45-bf16-tma-sk-4-8-token-tile"),
    pytest.param(16, 72, 45, tma_sk(), id="M16-K72-N45-bf16-tma-sk-per-step"),
    pytest.param(9, 72, 80, tma_sk(programs=2), id="M9-K72-N80-bf16-tma-sk-round-shared"),
    pytest.param(40, 72, 45, tma_sk(programs=3), id="M40-K72-N45-bf16-tma-sk-token-tile64"),
]


def _inputs(m, k, n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k), generator=gen).to(torch.bfloat16)
    w = (torch.randn((n, k), generator=gen) * 0.05).to(torch.bfloat16)
    return x, w


@pytest.mark.parametrize("m, k, n, config", CASES)
def test_triton(m, k, n, config):
    x, w = _inputs(m, k, n)
    assert_gemm_close("skinny_gemm", skinny_gemm_triton(x, w, config=config), x, w)
    out32 = skinny_gemm_triton(x, w, out_dtype=torch.float32, config=config)
    assert out32.dtype == torch.float32
    assert_gemm_close("skinny_gemm fp32 out", out32, x, w)


@pytest.mark.parametrize("m, k, n, config", CASES[:4])
def test_reference(m, k, n, config):
    x, w = _inputs(m, k, n)
    assert_gemm_close("skinny_gemm_ref", skinny_gemm_ref(x, w, config=config), x, w)


def test_signature_matches_reference():
    assert inspect.signature(skinny_gemm_triton) == inspect.signature(skinny_gemm_ref)


def test_splitk_is_deterministic_and_leaves_counters_zero():
    x, w = _inputs(5, 96, 40)
    config = dot(bn=16, bk=16, split=4)
    first = skinny_gemm_triton(x, w, config=config)
    second = skinny_gemm_triton(x, w, config=config)
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))
    assert int(lock_buffer(x.device, 1).abs().sum()) == 0


def test_dot_prefetch_gives_the_same_bits():
    """Loading the first K step before the PDL wait changes where the loads sit, not the sums."""
    x, w = _inputs(17, 67, 45)
    plain = skinny_gemm_triton(x, w, config=dot(bn=32, bk=16, split=3))
    early = skinny_gemm_triton(x, w, config=dot(bn=32, bk=16, split=3, prefetch=1))
    assert torch.equal(plain.view(torch.int16), early.view(torch.int16))


def test_streamk_is_deterministic_and_leaves_counters_zero():
    """Tiles summed from partials of several programs: same bits on every run, counters reset."""
    x, w = _inputs(1, 200, 40)
    config = streamk(bn=8, bk=32, programs=6)  # 5 tiles x 7 steps over 6 programs
    first = skinny_gemm_triton(x, w, config=config)
    second = skinny_gemm_triton(x, w, config=config)
    assert torch.equal(first.view(torch.int16), second.view(torch.int16))
    assert int(lock_buffer(x.device, 1).abs().sum()) == 0
    assert_gemm_close("stream-K", first, x, w)


def test_streamk_split_covers_every_k_step_once():
    """The schedule behind both stream-K GEMVs: whole rounds data-parallel, the rest's K steps in
    ranges of ``per`` (at most one tile's worth, so a range touches at most two tiles), every
    (tile, step) unit owned by exactly one program."""
    from specpilot.kernels.common.streamk import streamk_split

    for tiles in range(1, 23):
        for steps in range(1, 9):
            for slots in range(1, 27):
                dp, programs, per = streamk_split(tiles, steps, slots)
                assert dp % slots == 0 and 0 <= tiles - dp and (dp == 0 or tiles - dp < slots)
                units = (tiles - dp) * steps
                owned = [u for p in range(programs) for u in range(p * per,
                                                                    min(p * per + per, units))]
                assert owned == list(range(units))  # contiguous, disjoint, complete
                assert per <= steps and programs <= max(slots, 1)
                dp_owned = sorted(t for p in range(programs) for t in range(p, dp, programs))
                assert dp_owned == list(range(dp))
                # K-step unit of (shared tile t, step s) is t * steps + s; its owner is u // per
                for t in range(tiles - dp):
                    owners = {(t * steps + s) // per for s in range(steps)}
                    assert owners == set(range(t * steps // per, (t * steps + steps - 1) // per + 1))


def test_default_config_and_linear():
    x, w = _inputs(2, 40, 24)
    assert_gemm_close("linear", skinny_gemm.linear(x, w), x, w)
    x1 = x[:1]
    assert_gemm_close("linear M=1", skinny_gemm.linear(x1, w), x1, w)


def test_fuse_splits_back():
    x, w = _inputs(4, 32, 48)
    fused, sizes = skinny_gemm.fuse([w[:16], w[16:20], w[20:]])
    assert sizes == [16, 4, 28]
    parts = skinny_gemm.linear(x, fused, dot()).split(sizes, dim=-1)
    for part, ref in zip(parts, (w[:16], w[16:20], w[20:])):
        assert_gemm_close("fused part", part, x, ref)


def test_strided_x_and_empty_shapes():
    x, w = _inputs(3, 48, 20)
    wide = torch.zeros((3, 96), dtype=torch.bfloat16)
    wide[:, ::2] = x
    assert_gemm_close("strided x", skinny_gemm_triton(wide[:, ::2], w, config=dot()), x, w)
    assert skinny_gemm_triton(x[:0], w, config=dot()).shape == (0, 20)


@pytest.mark.parametrize("config, m, message", [
    ({**dot(), "BLOCK_Q": 4}, 2, "unknown config keys"),
    (gemv(), 3, "cannot run M=3"),
    (streamk(), 2, "cannot run M=2"),
    ({**streamk(), "PDL": 1}, 1, "interpreter cannot run"),
    ({**streamk(), "PDL": 2}, 1, "PDL"),
    ({**gemv(), "L2_PREFETCH": 4}, 1, "L2_PREFETCH > 0 is inline PTX"),
    ({**dot(), "L2_PREFETCH": 3}, 2, "L2_PREFETCH"),
    (dot(bn=24), 2, "power of two"),
    (dot(bn=8), 2, "BLOCK_N >= 16"),
    (dot(t_min=8), 16, "BLOCK_T_MIN=8 pads only M below 16"),
    (dot(t_min=2), 4, "BLOCK_T_MIN"),
    ({"kernel": "mma"}, 2, "kernel"),
])
def test_bad_config_is_rejected(config, m, message):
    x, w = _inputs(m, 32, 16)
    with pytest.raises(ValueError, match=message):
        skinny_gemm_triton(x, w, config=config)


def test_tma_needs_16_byte_rows():
    """The TMA copies rows that start 16-byte aligned: K % 8 is refused by the space, a
    misaligned view by the launcher, each with a message that says so."""
    x, w = _inputs(3, 67, 45)
    with pytest.raises(ValueError, match="K a multiple of 8"):
        skinny_gemm_triton(x, w, config=tma())
    x, w = _inputs(3, 74, 45)
    x_view, w_view = x[:, 1:73], w[:, 1:73]  # rows 148 bytes apart, starting 2 bytes in
    with pytest.raises(ValueError, match="16-byte aligned"):
        skinny_gemm_triton(x_view, w_view, config=tma())
    assert_gemm_close("tma on copies", skinny_gemm_triton(x_view.contiguous(),
                                                          w_view.contiguous(), config=tma()),
                      x_view, w_view)


def test_space_data():
    assert space.KEY == ("M_BUCKET", "N", "K")
    assert sum(1 for _ in space.configs()) == sum(math.prod(len(c) for c in p.values())
                                     for p in space.PARAMS.values())
    for config in space.SWEEP:  # PDL is GPU-only: validated here without it
        m = (1 if config["kernel"].startswith("gemv")
             else 4 if config.get("BLOCK_T_MIN", 16) < 16 else 16)
        space.validate({**config, "PDL": 0} if "PDL" in config else config, m, 5120, 5120)
    assert [space.m_bucket(m) for m in (1, 3, 16, 17, 64, 65, 130)] == [1, 4, 16, 32, 64, 128, 192]
    assert space.default_config(1, 5120, 17408)["kernel"] == "gemv"
    assert space.default_config(16, 5120, 17408)["kernel"] == "dot"


def test_wrong_dtype():
    x, w = _inputs(2, 16, 16)
    with pytest.raises(TypeError):
        skinny_gemm_triton(x.float(), w, config=dot())


def test_gemv_rows_take_strided_x():
    """The GEMV for 2 rows reads each row at x's row stride (a slice of a wider buffer)."""
    gen = torch.Generator().manual_seed(3)
    wide = torch.randn((2, 80), generator=gen).to(torch.bfloat16)
    x = wide[:, 5:72]
    w = (torch.randn((45, 67), generator=gen) * 0.05).to(torch.bfloat16)
    assert x.stride(0) == 80
    out = skinny_gemm_triton(x, w, config=gemv(bn=8, bk=16))
    assert_gemm_close("skinny_gemm strided x", out, x, w)


def test_gemv_takes_at_most_2_rows_and_its_tile_must_fit():
    x, w = _inputs(3, 67, 45)
    with pytest.raises(ValueError, match="cannot run M=3"):
        skinny_gemm_triton(x, w, config=gemv())
    # 2 x 16 x 128 partial products over 32 threads is 128 registers each (M = 1: 64, fits)
    with pytest.raises(ValueError, match="M=2: 2 rows"):
        skinny_gemm_triton(x[:2], w, config=gemv(bn=16, bk=128))
    skinny_gemm_triton(x[:1], w, config=gemv(bn=16, bk=128))
