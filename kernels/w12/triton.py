"""Triton W12 encode/decode: plane kernels for pack/unpack and the in-register decode helpers.

One decode serves the GEMMs and unpack (:func:`w12_decode_scaled`): it writes ``C0 | code`` into
the exponent field, for the constant ``C0 = 0x70``, i.e. every weight times ``2^(C0 - base)``.
With ``code = c3 c2 c1 c0`` the scaled bf16 is two bytes that the planes hold almost as they are
(:mod:`specpilot.kernels.w12.format`): the low byte ``c0 m6..m0`` is the ``sm`` byte, and the high
byte ``s 0 1 1 1 c3 c2 c1`` is ``C0 >> 1 = 0x38`` ORed with the sign and three code bits taken from
the ``nib`` byte (:func:`high_bytes`: bits 7 and 2..0 for the low half, 6 and 5..3 for the high)::

    bits = high_bytes(nib) << 8 | sm

The GEMMs multiply their fp32 sums by ``2^(base - C0)`` once (:func:`window_scale`; ``base`` in
[1, 239] keeps it a normal fp32 and every in-window weight a normal number). A power-of-two scale
commutes with fp32 rounding, so the sums equal those of the true weights (outside fp32
underflow). Unpack adds ``(base - C0) << 7`` to the bits instead: the exponent field becomes
``base + code`` in [1, 254], so nothing carries into the sign. What the constant buys: the decode
is a short chain of integer ops on the two loaded tiles and compile-time constants, which Triton
moves past the layout conversion into the MMA operand layout: the bytes go from shared memory
straight into the A fragments and are decoded there, with no bf16 round trip through shared memory.

``DECODE="int"`` is that formula in Triton integer ops; ``DECODE="prmt"`` does it on four weights
per inline-PTX call (one 32-bit register of ``sm`` bytes and one of ``nib`` bytes): one ``lop3``
(low half) or ``shl``/``shr`` and two ``lop3`` (high half) build the four high bytes, and one
``prmt`` per pair interleaves them with the low bytes into a bf16x2 register; the fp32 variant
(:func:`w12_decode_f32`, for the GEMVs) widens each pair with a ``shl`` and an ``and``. Per weight
that is 0.75 (low) or 1.5 (high) instructions for bf16 and 1.75 or 2.5 for fp32, against 3.0 or
3.25 for bf16 in the former layout (sign in the ``sm`` byte, the code in a nibble, two ``prmt``, an
``and`` and two ``mad`` per pair: REFERENCE-kernels.md §3.4). It needs a GPU; the interpreter
runs ``"int"``. Both are bit-exact by construction (``tests/kernels/test_w12_decode_asm.py`` runs
the PTX on every byte pair through a small PTX evaluator), and every kernel using them is checked
against the reference before it is timed.
"""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.w12 import reference as ref
from specpilot.kernels.w12 import space
from specpilot.kernels.w12.format import BLOCK_ROWS
from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.format import block_pairs_for

C0: tl.constexpr = tl.constexpr(0x70)


def _high_bytes(nib: str, hi: bool) -> str:
    """PTX setting ``w12h`` to the high bytes ``s | C0 >> 1 | c3 c2 c1`` of the four weights whose
    nibble bytes are in register ``nib`` (lop3 0xEA: ``(a & b) | c``)."""
    fill = f"{(C0.value >> 1) * 0x01010101:#010x}"
    if not hi:  # s at bit 7, c3 c2 c1 at bits 2..0: in place
        return f"lop3.b32 w12h, {nib}, 0x87878787, {fill}, 0xEA;\n"
    return (f"shr.b32 w12t, {nib}, 3;\nlop3.b32 w12t, w12t, 0x07070707, {fill}, 0xEA;\n"
            f"shl.b32 w12h, {nib}, 1;\nlop3.b32 w12h, w12h, 0x80808080, w12t, 0xEA;\n")


def _pairs_asm(hi: bool) -> str:
    """Four weights -> two bf16x2 registers: one ``prmt`` per pair puts each weight's high byte
    above its low byte."""
    return ("{\n.reg .b32 w12h, w12t;\n" + _high_bytes("$3", hi)
            + "prmt.b32 $0, $2, w12h, 0x5140;\nprmt.b32 $1, $2, w12h, 0x7362;\n}")


def _f32_asm(hi: bool) -> str:
    """Four weights -> four fp32 registers (the bf16 pair's halves widened in place)."""
    return ("{\n.reg .b32 w12h, w12t, w12p;\n" + _high_bytes("$5", hi)
            + "prmt.b32 w12p, $4, w12h, 0x5140;\nshl.b32 $0, w12p, 16;\n"
            "and.b32 $1, w12p, 0xFFFF0000;\n"
            "prmt.b32 w12p, $4, w12h, 0x7362;\nshl.b32 $2, w12p, 16;\n"
            "and.b32 $3, w12p, 0xFFFF0000;\n}")


SCALED_ASM: tl.constexpr = tl.constexpr((_pairs_asm(False), _pairs_asm(True)))
SCALED_F32_ASM: tl.constexpr = tl.constexpr((_f32_asm(False), _f32_asm(True)))

DECODE_ASM = {"int": 0, "prmt": 1, "prmt-bf16": 2}
"""The decode helpers' ``ASM`` for each ``DECODE`` config choice: 0 Triton integer ops, 1 the PTX
decode, 2 the PTX decode to bf16 pairs with the fp32 widening left to Triton (differs from 1 in
:func:`w12_decode_f32` only)."""


def window_scale(base: int) -> float:
    """``2^(base - C0)``: what the GEMMs multiply their fp32 sums by after a scaled decode."""
    if not 1 <= base <= 239:
        raise ValueError(f"W12 window base {base} is outside [1, 239]: pack the tensor again")
    return 2.0 ** (base - C0.value)


@triton.jit
def high_bytes(nib, HI: tl.constexpr):
    """int16 tile of the weights' high bytes ``s | C0 >> 1 | c3 c2 c1`` (bits 15..8 of the scaled
    bf16) from their nibble bytes."""
    n = nib.to(tl.int16)
    if HI:
        h = ((n << 1) & 0x80) | ((n >> 3) & 0x07)
    else:
        h = n & 0x87
    return h | (C0 >> 1)


@triton.jit
def w12_decode_scaled(sm, nib, HI: tl.constexpr, ASM: tl.constexpr):
    """bf16 tile of the weights times ``2^(C0 - base)`` (exponent field ``C0 | code``).

    Only integer ops on the two tiles and constants, so Triton decodes in the MMA operand layout.
    """
    if ASM:
        w = tl.inline_asm_elementwise(SCALED_ASM[HI], "=r,=r,r,r", [sm, nib], dtype=tl.bfloat16,
                                      is_pure=True, pack=4)
    else:
        bits = (high_bytes(nib, HI) << 8) | sm.to(tl.int16)
        w = bits.to(tl.bfloat16, bitcast=True)
    return w


@triton.jit
def w12_decode_f32(sm, nib, HI: tl.constexpr, ASM: tl.constexpr):
    """fp32 tile of the same scaled weights (exact: every bf16 is an fp32), widened inside the
    PTX decode (``ASM == 1``) or after the bf16 one (``ASM == 2``: more instructions, fewer live
    registers in the one-warp pipelined GEMV)."""
    if ASM == 2:
        w = w12_decode_scaled(sm, nib, HI, ASM).to(tl.float32)
    elif ASM:
        w = tl.inline_asm_elementwise(SCALED_F32_ASM[HI], "=r,=r,=r,=r,r,r", [sm, nib],
                                      dtype=tl.float32, is_pure=True, pack=4)
    else:
        bits = (high_bytes(nib, HI).to(tl.int32) << 24) | (sm.to(tl.int32) << 16)
        w = bits.to(tl.float32, bitcast=True)
    return w


@triton.jit
def w12_decode_bf16(sm, nib, base_shift, HI: tl.constexpr, ASM: tl.constexpr):
    """The exact bf16 weights of uint8 ``sm`` and ``nib`` tiles: the scaled decode with
    ``base_shift = (base - C0) << 7`` added to the bits (the exponent field then
    ``base + code``)."""
    bits = w12_decode_scaled(sm, nib, HI, ASM).to(tl.int16, bitcast=True).to(tl.int32)
    return (bits + base_shift).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def plane_rows(offs_r, K2, BR: tl.constexpr, BP: tl.constexpr):
    """int64 offset in ``planes`` of each row's first ``nib`` byte (:mod:`..format`): its block
    row, then its row inside the block."""
    r = offs_r.to(tl.int64)
    blocks_k = (K2 + BP - 1) // BP
    return (r // BR) * (blocks_k * (3 * BR * BP)) + (r % BR) * BP


@triton.jit
def plane_cols(j0, BR: tl.constexpr, BP: tl.constexpr):
    """Offset of pair column ``j0`` from a row's :func:`plane_rows` (``j0`` a multiple of a step
    that divides ``BP``, so the step's columns are contiguous); the ``sm`` halves follow at
    ``+ BR*BP`` (low) and ``+ 2*BR*BP`` (high)."""
    return (j0 // BP) * (3 * BR * BP - BP) + j0  # = (j0 // BP) * 3*BR*BP + j0 % BP


@triton.jit
def w12_fwd_kernel_encode(bits_ptr, planes_ptr, R, K, K2, base, BLOCK_R: tl.constexpr,
                          BLOCK_J: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr):
    """bf16 bits ``[R, K]`` (int16) -> blocked ``planes`` (zero-filled by the caller); grid
    (R/BLOCK_R, K2/BLOCK_J), ``BLOCK_J`` dividing ``BP``."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    j0 = tl.program_id(1) * BLOCK_J
    offs_j = j0 + tl.arange(0, BLOCK_J)
    r_mask = offs_r[:, None] < R
    j_mask = r_mask & (offs_j[None, :] < K2)
    row = offs_r.to(tl.int64)[:, None]
    # Padding (column K when K is odd) encodes as bits 0 -> sm 0, code 0.
    a = tl.load(bits_ptr + row * K + offs_j[None, :], mask=j_mask, other=0).to(tl.int32) & 0xFFFF
    b_col = K2 + offs_j[None, :]
    b = tl.load(bits_ptr + row * K + b_col, mask=j_mask & (b_col < K), other=0)
    b = b.to(tl.int32) & 0xFFFF
    code_a = tl.minimum(tl.maximum(((a >> 7) & 0xFF) - base, 0), 15)
    code_b = tl.minimum(tl.maximum(((b >> 7) & 0xFF) - base, 0), 15)
    sm_a = ((code_a & 1) << 7) | (a & 0x7F)
    sm_b = ((code_b & 1) << 7) | (b & 0x7F)
    nib = ((a >> 8) & 0x80) | (code_a >> 1) | ((b >> 9) & 0x40) | ((code_b >> 1) << 3)
    dst = (planes_ptr + plane_rows(offs_r, K2, BR, BP)[:, None] + plane_cols(j0, BR, BP)
           + tl.arange(0, BLOCK_J)[None, :])
    tl.store(dst, nib.to(tl.uint8), mask=j_mask)
    tl.store(dst + BR * BP, sm_a.to(tl.uint8), mask=j_mask)
    tl.store(dst + 2 * BR * BP, sm_b.to(tl.uint8), mask=j_mask)


@triton.jit
def w12_fwd_kernel_decode(planes_ptr, out_ptr, R, K, K2, base_shift, BLOCK_R: tl.constexpr,
                          BLOCK_J: tl.constexpr, BR: tl.constexpr, BP: tl.constexpr,
                          ASM: tl.constexpr):
    """Blocked ``planes`` -> bf16 ``out [R, K]`` (escapes not applied); grid (R/BLOCK_R,
    K2/BLOCK_J), ``BLOCK_J`` dividing ``BP``."""
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    j0 = tl.program_id(1) * BLOCK_J
    offs_j = j0 + tl.arange(0, BLOCK_J)
    j_mask = (offs_r[:, None] < R) & (offs_j[None, :] < K2)
    src = (planes_ptr + plane_rows(offs_r, K2, BR, BP)[:, None] + plane_cols(j0, BR, BP)
           + tl.arange(0, BLOCK_J)[None, :])
    nib = tl.load(src, mask=j_mask, other=0)
    sm_a = tl.load(src + BR * BP, mask=j_mask, other=0)
    sm_b = tl.load(src + 2 * BR * BP, mask=j_mask, other=0)
    w_a = w12_decode_bf16(sm_a, nib, base_shift, False, ASM)
    w_b = w12_decode_bf16(sm_b, nib, base_shift, True, ASM)
    out_row = out_ptr + offs_r.to(tl.int64)[:, None] * K
    tl.store(out_row + offs_j[None, :], w_a, mask=j_mask)
    b_col = K2 + offs_j[None, :]
    tl.store(out_row + b_col, w_b, mask=j_mask & (b_col < K))


def _checked(config: dict | None, block_pairs: int) -> dict:
    """``config``, or the default for ``block_pairs``-pair blocks; validated."""
    cfg = config or space.default_config(block_pairs)
    space.validate(cfg)
    if block_pairs % cfg["BLOCK_J"]:
        raise ValueError(f"BLOCK_J={cfg['BLOCK_J']} must divide the planes' {block_pairs}-pair "
                         "blocks")
    return cfg


def w12_pack(w: torch.Tensor, config: dict | None = None) -> W12Tensor:
    """Pack a bf16 tensor with the Triton encode kernel; same contract as ``w12_pack_ref``."""
    w2 = ref.as_rows(w)
    r, k = w2.shape
    k2 = (k + 1) // 2
    bp = block_pairs_for(k2)
    cfg = _checked(config, bp)
    base = ref.choose_base(w2)  # BASE_MIN for an empty tensor
    planes = torch.zeros((cdiv(r, BLOCK_ROWS), cdiv(k2, bp), 3, BLOCK_ROWS, bp),
                         dtype=torch.uint8, device=w.device)
    if w2.numel():
        grid = (cdiv(r, cfg["BLOCK_R"]), cdiv(k2, cfg["BLOCK_J"]))
        w12_fwd_kernel_encode[grid](w2.view(torch.int16), planes, r, k, k2, base,
                                    BLOCK_R=cfg["BLOCK_R"], BLOCK_J=cfg["BLOCK_J"],
                                    BR=BLOCK_ROWS, BP=bp, num_warps=cfg["num_warps"])
    return W12Tensor(w.shape, base, planes, *ref.escapes(w2, base))


def w12_unpack(packed: W12Tensor, config: dict | None = None) -> torch.Tensor:
    """Decode with the Triton kernel, then restore escapes; same contract as ``w12_unpack_ref``.
    Rows-order planes only (``W12Tensor.unpack`` re-lays a fragment-order tensor first)."""
    if packed.order != "rows":
        raise ValueError(f"w12_unpack reads rows-order planes, this tensor is in "
                         f"{packed.order!r} order: call its unpack() (it re-lays them)")
    cfg = _checked(config, packed.block_pairs)
    r, k, k2 = packed.rows, packed.cols, packed.k_half
    out = torch.empty((r, k), dtype=torch.bfloat16, device=packed.device)
    if out.numel():
        grid = (cdiv(r, cfg["BLOCK_R"]), cdiv(k2, cfg["BLOCK_J"]))
        w12_fwd_kernel_decode[grid](packed.planes, out, r, k, k2, (packed.base - C0.value) << 7,
                                    BLOCK_R=cfg["BLOCK_R"], BLOCK_J=cfg["BLOCK_J"],
                                    BR=packed.block_rows, BP=packed.block_pairs,
                                    ASM=DECODE_ASM[cfg["DECODE"]], num_warps=cfg["num_warps"])
    ref.apply_escape_bits(out.view(torch.int16), packed)
    return out.reshape(packed.shape)
