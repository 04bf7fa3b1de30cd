"""The inline-PTX W12 decode (``DECODE="prmt"``) run on the CPU by a small evaluator of the PTX it
emits, on every (sm byte, nib byte) pair in every byte lane, against the torch reference unpack.

The interpreter cannot run inline PTX, and the GPU checks only see the bytes real weights produce;
this covers all 2^16 byte pairs per half, both output widths (bf16 pairs and fp32).
"""

import re

import pytest
import torch

from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.format import block_planes
from specpilot.kernels.w12.reference import w12_unpack_ref
from specpilot.kernels.w12.triton import C0
from specpilot.kernels.w12.triton import SCALED_ASM
from specpilot.kernels.w12.triton import SCALED_F32_ASM

MASK32 = 0xFFFFFFFF


def _lop3(a, b, c, lut):
    """PTX ``lop3.b32``: bit i of the result is bit ``(a_i << 2 | b_i << 1 | c_i)`` of ``lut``."""
    out = torch.zeros_like(a)
    for idx in range(8):
        if lut >> idx & 1:
            term = torch.full_like(a, MASK32)
            for bit, v in zip((4, 2, 1), (a, b, c)):
                term &= v if idx & bit else ~v & MASK32
            out |= term
    return out


def _prmt(a, b, sel):
    """PTX ``prmt.b32`` (default mode): byte k of the result is byte ``sel[4k+2:4k]`` of
    ``{b, a}``, replicated from its sign bit when ``sel`` bit ``4k+3`` is set."""
    pool = (b << 32) | a
    out = torch.zeros_like(a)
    for k in range(4):
        nibble = sel >> (4 * k) & 0xF
        byte = pool >> (8 * (nibble & 7)) & 0xFF
        if nibble & 8:
            byte = torch.where(byte & 0x80 != 0, 0xFF, 0)
        out |= byte << (8 * k)
    return out


OPS = {
    "mov": lambda a: a,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "shl": lambda a, n: (a << n) & MASK32,
    "shr": lambda a, n: a >> n,  # .b32: logical
    "lop3": _lop3,
    "prmt": _prmt,
}


def run_ptx(asm: str, inputs: list[torch.Tensor], num_outputs: int) -> list[torch.Tensor]:
    """Evaluate ``asm`` (the bodies Triton's ``inline_asm_elementwise`` gets: ``$0..`` outputs,
    then inputs; ``.reg`` declarations, braces) on int64 tensors holding 32-bit registers."""
    regs = {f"${num_outputs + i}": v for i, v in enumerate(inputs)}
    for line in asm.splitlines():
        line = line.strip()
        if line in ("{", "}") or line.startswith(".reg"):
            continue
        m = re.fullmatch(r"(\w+)\.b32 ([^;]+);", line)
        assert m, f"the evaluator does not know this PTX line: {line!r}"
        op, args = m.group(1), [x.strip() for x in m.group(2).split(",")]
        vals = [int(x, 0) if x[0].isdigit() else regs[x] for x in args[1:]]
        regs[args[0]] = OPS[op](*vals)
    return [regs[f"${i}"] for i in range(num_outputs)]


def _words(bytes_: torch.Tensor) -> torch.Tensor:
    """uint8 ``[n, 4]`` -> int64 ``[n]`` 32-bit little-endian words (Triton's ``pack=4``)."""
    b = bytes_.to(torch.int64)
    return b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16 | b[:, 3] << 24


def _all_pairs():
    """Every (sm, nib) byte pair in every lane of four: ``sm, nib`` uint8 ``[4 * 2^16, 4]``, other
    lanes random."""
    g = torch.Generator().manual_seed(0)
    sweep = torch.arange(1 << 16)
    rows = []
    for lane in range(4):
        sm = torch.randint(0, 256, (1 << 16, 4), generator=g)
        nib = torch.randint(0, 256, (1 << 16, 4), generator=g)
        sm[:, lane], nib[:, lane] = sweep & 0xFF, sweep >> 8
        rows.append((sm, nib))
    sm, nib = (torch.cat(x).to(torch.uint8) for x in zip(*rows))
    return sm, nib


def _reference_scaled(sm, nib, hi: bool) -> torch.Tensor:
    """The bf16 bits (int64) the reference unpack gives these bytes at ``base = C0``: the scaled
    weights the GEMMs decode."""
    n = sm.numel()
    lo_sm = torch.zeros(n, dtype=torch.uint8) if hi else sm.reshape(-1)
    hi_sm = sm.reshape(-1) if hi else torch.zeros(n, dtype=torch.uint8)
    planes = block_planes(torch.cat([lo_sm, hi_sm])[None], nib.reshape(1, -1))
    empty = torch.zeros(0)
    packed = W12Tensor(torch.Size((1, 2 * n)), C0.value, planes, torch.zeros(2, dtype=torch.int32),
                       empty.int(), empty.short(), empty.float())
    bits = w12_unpack_ref(packed).view(torch.int16).to(torch.int64) & 0xFFFF
    return bits[0, n:] if hi else bits[0, :n]


@pytest.mark.parametrize("hi", [False, True], ids=["low-half", "high-half"])
def test_prmt_decode_matches_the_reference_on_every_byte_pair(hi):
    sm, nib = _all_pairs()
    expect = _reference_scaled(sm, nib, hi).reshape(-1, 4)
    pairs = run_ptx(SCALED_ASM.value[hi], [_words(sm), _words(nib)], 2)
    got = torch.stack([pairs[0] & 0xFFFF, pairs[0] >> 16, pairs[1] & 0xFFFF, pairs[1] >> 16], 1)
    assert torch.equal(got, expect)
    wide = run_ptx(SCALED_F32_ASM.value[hi], [_words(sm), _words(nib)], 4)
    assert torch.equal(torch.stack(wide, 1), expect << 16)  # bf16 -> fp32 is a 16-bit shift


def test_evaluator_ops():
    """The evaluator's PTX semantics on hand-checked values (lop3 LUTs as in the PTX manual)."""
    a, b, c = (torch.tensor([v]) for v in (0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA))
    assert int(_lop3(a, b, c, 0xEA)) == (0xF0F0F0F0 & 0xCCCCCCCC) | 0xAAAAAAAA
    assert int(_lop3(a, b, c, 0x96)) == 0xF0F0F0F0 ^ 0xCCCCCCCC ^ 0xAAAAAAAA
    x, y = torch.tensor([0x33221100]), torch.tensor([0x77665544])
    assert int(_prmt(x, y, 0x5140)) == 0x55114400
    assert int(_prmt(x, y, 0x7362)) == 0x77336622
    assert int(_prmt(torch.tensor([0x80]), y, 0x0008)) == 0x808080FF  # bit 3: sign fill
