"""W12 pack/unpack: bit-exact round trips (torch reference and Triton interpreter) on every kind of
bf16 tensor, including those that escape the exponent window."""

import inspect

import pytest
import torch

from specpilot.kernels import w12
from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.format import block_pairs_for
from specpilot.kernels.w12.reference import w12_pack_ref
from specpilot.kernels.w12.reference import w12_unpack_ref
from specpilot.kernels.w12.triton import w12_pack
from specpilot.kernels.w12.triton import w12_unpack

SMALL = {"BLOCK_R": 2, "BLOCK_J": 16, "num_warps": 4, "DECODE": "int"}


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def normal(shape, seed=0):
    return torch.randn(shape, generator=_gen(seed)) * 0.02


def student_t(shape, seed=0):
    g = _gen(seed)
    z = torch.randn(shape, generator=g)
    chi2 = (torch.randn((5, *shape), generator=g) ** 2).sum(0)
    return 0.02 * z / (chi2 / 5).sqrt()


def laplace(shape, seed=0):
    u = torch.rand(shape, generator=_gen(seed)) - 0.5
    return -0.02 * u.sign() * torch.log1p(-2 * u.abs())


def with_zeros(shape, seed=0):
    w = normal(shape, seed)
    w[torch.rand(shape, generator=_gen(seed + 1)) < 0.2] = 0.0
    w.view(-1)[::7] = -0.0
    return w


def subnormals(shape, seed=0):
    w = normal(shape, seed)
    mask = torch.rand(shape, generator=_gen(seed + 1)) < 0.3
    tiny = torch.randint(1, 128, shape, generator=_gen(seed + 2), dtype=torch.int16)
    bits = w.to(torch.bfloat16).view(torch.int16)
    bits[mask] = tiny[mask] | (torch.randint(0, 2, shape, generator=_gen(seed + 3),
                                             dtype=torch.int16)[mask] << 15)
    return bits.view(torch.bfloat16)


def nonfinite(shape, seed=0):
    w = normal(shape, seed).to(torch.bfloat16)
    flat = w.view(-1)
    flat[0::5] = float("inf")
    flat[1::5] = float("-inf")
    flat[2::5] = float("nan")
    bits = w.view(torch.int16).view(-1)
    bits[3::11] = 0x7F81  # a NaN with a non-default payload
    bits[4::11] = -0x7F  # 0xFF81: negative NaN with payload
    return w


def high_escape(shape, seed=0):
    """Magnitudes log-uniform over 2^-60..2^60: most weights fall outside any 16-binade window."""
    g = _gen(seed)
    sign = torch.randn(shape, generator=g).sign()
    return torch.exp2(torch.rand(shape, generator=g) * 120 - 60) * sign


def all_bit_patterns(shape=None, seed=0):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    return bits.view(torch.bfloat16).reshape(256, 256)


DISTS = [normal, student_t, laplace, with_zeros, subnormals, nonfinite, high_escape]
# (6, 1153): K2 = 577 in ten 64-pair blocks, the last one padded (Triton pack/unpack cross blocks)
SHAPES = [(45, 67), (3, 5, 7), (2, 64), (6, 1153)]


def _bits_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int16),
                                                                     b.view(torch.int16))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) + "-bf16")
@pytest.mark.parametrize("dist", DISTS, ids=lambda d: d.__name__)
def test_round_trip(dist, shape):
    w = dist(shape).to(torch.bfloat16)
    packed = w12_pack_ref(w)
    assert _bits_equal(w12_unpack_ref(packed), w)
    assert _bits_equal(w12_unpack(packed, config=SMALL), w)
    tri = w12_pack(w, config=SMALL)
    assert tri.base == packed.base
    for name in ("planes", "row_ptr", "esc_col", "esc_bits"):
        assert torch.equal(getattr(tri, name), getattr(packed, name)), name
    assert torch.equal(tri.esc_delta.view(torch.int32), packed.esc_delta.view(torch.int32))


def test_every_bit_pattern():
    w = all_bit_patterns()
    packed = w12_pack_ref(w)
    assert _bits_equal(w12_unpack_ref(packed), w)
    assert _bits_equal(w12_unpack(packed, config={**SMALL, "BLOCK_J": 128}), w)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (0, 5), (5, 0), (4, 1)],
                         ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_edge_shapes(shape):
    w = normal(shape, 3).to(torch.bfloat16)
    packed = w12.pack(w)
    assert _bits_equal(packed.unpack(), w)
    assert _bits_equal(w12_unpack(w12_pack(w, config=SMALL), config=SMALL), w)


def test_window_and_escapes():
    w = normal((64, 256)).to(torch.bfloat16)
    packed = w12.pack(w)
    exp = (w.view(torch.int16).to(torch.int32) >> 7) & 0xFF
    inside = (exp >= packed.base) & (exp <= packed.base + 15)
    assert packed.num_escapes == int((~inside).sum())
    for base in range(241):  # no other window covers more weights
        assert int(((exp >= base) & (exp <= base + 15)).sum()) <= int(inside.sum())
    assert packed.escape_rate < 1e-3
    assert packed.planes.shape == (16, 1, 3, 4, 128)  # 64 rows in blocks of 4, one 128-pair block
    assert packed.nbytes == 64 * 256 * 3 // 2 + 4 * 65 + 10 * packed.num_escapes
    assert w12.pack(high_escape((32, 64)).to(torch.bfloat16)).escape_rate > 0.5


def test_state_dict_round_trip_and_corruption():
    w = with_zeros((9, 33)).to(torch.bfloat16)
    packed = w12.pack(w)
    state = packed.state_dict("layer.0.")
    again = W12Tensor.from_state_dict(state, "layer.0.")
    assert _bits_equal(again.unpack(), w)
    bad = {**state, "layer.0.planes": state["layer.0.planes"][:, :, :, :, :-1]}
    with pytest.raises(ValueError, match="planes"):
        W12Tensor.from_state_dict(bad, "layer.0.")
    old = {k: v for k, v in state.items() if not k.endswith("planes")}
    old["layer.0.sm"], old["layer.0.nib"] = packed.row_major()
    with pytest.raises(ValueError, match="before the blocked layout"):
        W12Tensor.from_state_dict(old, "layer.0.")
    unversioned = {k: v for k, v in state.items() if not k.endswith("bit_layout")}
    with pytest.raises(ValueError, match="bit layout 1 .* pack the weight again"):
        W12Tensor.from_state_dict(unversioned, "layer.0.")


def test_blocked_layout():
    """Block (i, b) of ``planes`` holds the [BR, BP] tiles of rows i*BR.. and pair columns b*BP..
    of nib, the low sm half and the high sm half, zero past the tensor; row_major() inverts it."""
    w = normal((9, 1031), 4).to(torch.bfloat16)  # K2 = 516: nine 64-pair blocks, 9 rows: three
    packed = w12_pack_ref(w)
    sm, nib = packed.row_major()
    assert sm.shape == (9, 1032) and nib.shape == (9, 516)
    p = packed.planes
    assert p.shape == (3, 9, 3, 4, 64)
    assert torch.equal(p[1, 8, 0, 0, :4], nib[4, 512:516])
    assert torch.equal(p[2, 0, 1, 0], sm[8, :64])
    assert torch.equal(p[0, 8, 2, 3, :4], sm[3, 516 + 512:])
    assert not p[2, :, :, 1:].any() and not p[:, 8, :, :, 4:].any()  # padding rows and pairs
    # the bytes: sm = c0 m6..m0; nib = s_lo s_hi c3c2c1_hi c3c2c1_lo (code = exponent - base)
    bits = w.view(torch.int16).to(torch.int32) & 0xFFFF
    bits = torch.cat([bits, bits.new_zeros(9, 1)], dim=1)  # the padding column encodes as 0
    code = (((bits >> 7) & 0xFF) - packed.base).clamp(0, 15)
    assert torch.equal(sm.to(torch.int32), ((code & 1) << 7) | (bits & 0x7F))
    sign = bits >> 15
    lo, hi = slice(0, 516), slice(516, 1032)
    expect = ((sign[:, lo] << 7) | (sign[:, hi] << 6) | ((code[:, hi] >> 1) << 3)
              | (code[:, lo] >> 1))
    assert torch.equal(nib.to(torch.int32), expect)
    # the least padding, the largest block on ties
    assert [block_pairs_for(k2) for k2 in (2560, 3328, 8704, 9984, 432, 516, 96, 20, 1)] == [
        512, 256, 512, 256, 64, 64, 128, 32, 16]


# Cuts fall on the planes' 4-row blocks: 10 rows -> 8 per block, 1 -> 4.
@pytest.mark.parametrize("max_weights, num_blocks", [(67 * 10, 6), (67 * 45, 1), (1, 12)],
                         ids=["blocks6", "whole", "one-plane-block-each"])
def test_row_blocks(max_weights, num_blocks):
    w = high_escape((45, 67)).to(torch.bfloat16)  # escapes in every row
    packed = w12.pack(w)
    blocks = packed.row_blocks(max_weights)
    assert len(blocks) == num_blocks
    for block in blocks:
        block.validate()
    assert sum(b.num_escapes for b in blocks) == packed.num_escapes
    assert _bits_equal(torch.cat([b.unpack() for b in blocks]), w)
    assert _bits_equal(torch.cat([w12_unpack(b, config=SMALL) for b in blocks]), w)
    with pytest.raises(ValueError, match="2-D"):
        w12.pack(normal((2, 3, 4)).to(torch.bfloat16)).row_blocks(8)


def test_rejects_non_bf16():
    with pytest.raises(TypeError, match="bfloat16"):
        w12.pack(torch.zeros(4, 4))


def test_signatures_match_reference():
    assert inspect.signature(w12_pack) == inspect.signature(w12_pack_ref)
    assert inspect.signature(w12_unpack) == inspect.signature(w12_unpack_ref)


def test_prmt_decode_is_refused_on_the_interpreter():
    packed = w12.pack(normal((4, 8)).to(torch.bfloat16))
    with pytest.raises(ValueError, match="interpreter"):
        w12_unpack(packed, config={**SMALL, "DECODE": "prmt"})
