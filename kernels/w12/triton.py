"""Triton W12 encode/decode: plane kernels for pack/unpack and the in-register decode helper.

One decode serves the GEMMs and unpack (:func:`w12_decode_scaled`): it writes ``C0 | code`` into
the exponent field, for the constant ``C0 = 0x70``, i.e. every weight times ``2^(C0 - base)``::

    bits = (sm & 0x80) << 8 | (sm & 0x7F) | (C0 | code) << 7

The GEMMs multiply their fp32 sums by ``2^(base - C0)`` once (:func:`window_scale`; ``base`` in
[1, 239] keeps it a normal fp32 and every in-window weight a normal number). A power-of-two scale
commutes with fp32 rounding, so the sums equal those of the true weights (outside fp32
underflow). Unpack adds ``(base - C0) << 7`` to the bits instead: the exponent field becomes
``base + code`` in [1, 254], so nothing carries into the sign. What the constant buys: ``C0 | code``
is one OR, so the decode is a chain of integer ops on the two loaded tiles and compile-time
constants, which Triton moves past the layout conversion into the MMA operand layout: the bytes go
from shared memory straight into the A fragments and are decoded there, with no bf16 round trip
through shared memory.

``DECODE="int"`` is that formula in Triton integer ops; ``DECODE="prmt"`` does it on four weights
per inline-PTX call, two per 32-bit register (``prmt`` bytes into 16-bit lanes, ``and``, two
``mad``: REFERENCE-kernels.md §3.4). It needs a GPU; the interpreter runs ``"int"``. Both are
bit-exact by construction, and every kernel using them is checked against the reference before it
is timed.
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

_PRMT_HEAD = "{\n.reg .b32 w12u, w12c, w12s, w12n, w12z;\nmov.b32 w12z, 0;\n"


# Base-free decode (C0 in the exponent field), two weights per 32-bit register: ``prmt`` the sm
# bytes and the (code | C0) bytes into 16-bit lanes, move the sign from bit 7 to bit 15
# (``u + (u & 0x80) * 255``) and add ``(C0 | code) << 7`` with one ``mad``; no lane can carry.
_SCALED_BODY = """
prmt.b32 w12u, $2, w12z, {sel};
prmt.b32 w12c, w12n, w12z, {sel};
and.b32 w12s, w12u, 0x00800080;
mad.lo.u32 w12u, w12s, 255, w12u;
mad.lo.u32 {dst}, w12c, 128, w12u;"""
_SCALED_PAIRS = (_SCALED_BODY.format(sel="0x4140", dst="$0")
                 + _SCALED_BODY.format(sel="0x4342", dst="$1"))


C0: tl.constexpr = tl.constexpr(0x70)


def _scaled_asm(hi: bool) -> str:
    shift = "shr.b32 w12n, $3, 4;\nand.b32 w12n, w12n, 0x0F0F0F0F;" if hi else \
        "and.b32 w12n, $3, 0x0F0F0F0F;"
    return (_PRMT_HEAD + shift + f"\nor.b32 w12n, w12n, {C0.value * 0x01010101:#010x};"
            + _SCALED_PAIRS + "\n}")


SCALED_ASM: tl.constexpr = tl.constexpr((_scaled_asm(False), _scaled_asm(True)))


def window_scale(base: int) -> float:
    """``2^(base - C0)``: what the GEMMs multiply their fp32 sums by after a scaled decode."""
    if not 1 <= base <= 239:
        raise ValueError(f"W12 window base {base} is outside [1, 239]: pack the tensor again")
    return 2.0 ** (base - C0.value)


@triton.jit
def w12_decode_scaled(sm, nib, HI: tl.constexpr, ASM: tl.constexpr):
    """bf16 tile of the weights times ``2^(C0 - base)`` (exponent field ``C0 | code``).

    Only integer ops on the two tiles and constants, so Triton decodes in the MMA operand layout.
    """
    if ASM:
        w = tl.inline_asm_elementwise(SCALED_ASM[HI], "=r,=r,r,r", [sm, nib], dtype=tl.bfloat16,
                                      is_pure=True, pack=4)
    else:
        s = sm.to(tl.int16)
        if HI:
            c = (nib >> 4).to(tl.int16)
        else:
            c = (nib & 15).to(tl.int16)
        bits = ((s & 0x80) << 8) | (s & 0x7F) | ((c | C0) << 7)
        w = bits.to(tl.bfloat16, bitcast=True)
    return w


@triton.jit
def w12_decode_bf16(sm, nib, base_shift, HI: tl.constexpr, ASM: tl.constexpr):
    """The exact bf16 weights of uint8 ``sm`` and ``nib`` tiles: the scaled decode with
    ``base_shift = (base - C0) << 7`` added to the bits (the exponent field then ``base + code``)."""
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
    sm_a = ((a >> 8) & 0x80) | (a & 0x7F)
    sm_b = ((b >> 8) & 0x80) | (b & 0x7F)
    dst = (planes_ptr + plane_rows(offs_r, K2, BR, BP)[:, None] + plane_cols(j0, BR, BP)
           + tl.arange(0, BLOCK_J)[None, :])
    tl.store(dst, (code_a | (code_b << 4)).to(tl.uint8), mask=j_mask)
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
    """Decode with the Triton kernel, then restore escapes; same contract as ``w12_unpack_ref``."""
    cfg = _checked(config, packed.block_pairs)
    r, k, k2 = packed.rows, packed.cols, packed.k_half
    out = torch.empty((r, k), dtype=torch.bfloat16, device=packed.device)
    if out.numel():
        grid = (cdiv(r, cfg["BLOCK_R"]), cdiv(k2, cfg["BLOCK_J"]))
        w12_fwd_kernel_decode[grid](packed.planes, out, r, k, k2, (packed.base - C0.value) << 7,
                                    BLOCK_R=cfg["BLOCK_R"], BLOCK_J=cfg["BLOCK_J"],
                                    BR=packed.block_rows, BP=packed.block_pairs,
                                    ASM=cfg["DECODE"] == "prmt", num_warps=cfg["num_warps"])
    ref.apply_escape_bits(out.view(torch.int16), packed)
    return out.reshape(packed.shape)
