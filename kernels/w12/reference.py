"""Pure-torch W12 pack and unpack (the ground truth for the Triton kernels and the CPU path).

Work is done in row chunks of about 2^24 weights, so packing a 1.3 G-weight lm_head needs a few
hundred MB of scratch, not 5 GB of int32.
"""

import math

import torch

from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.format import block_planes

WINDOW = 16
CHUNK = 1 << 24


def as_rows(w: torch.Tensor) -> torch.Tensor:
    """``w`` as a contiguous bf16 ``[R, K]`` matrix (0-d -> [1, 1], 1-d -> [1, K])."""
    if w.dtype != torch.bfloat16:
        raise TypeError(f"W12 packs bfloat16 tensors only, got {w.dtype}")
    k = w.shape[-1] if w.dim() else 1
    r = math.prod(w.shape[:-1]) if w.dim() else 1
    return w.contiguous().reshape(r, k)


def row_chunks(r: int, k: int):
    """Row slices of about :data:`CHUNK` weights each."""
    step = max(1, CHUNK // max(k, 1))
    for r0 in range(0, r, step):
        yield slice(r0, min(r, r0 + step))


def bits_of(w2: torch.Tensor) -> torch.Tensor:
    """The 16 bf16 bits of ``w2`` as non-negative int32."""
    return w2.view(torch.int16).to(torch.int32) & 0xFFFF


def bf16_of(bits: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`bits_of`: int32 holding 16 bits -> bf16 (wrapped to int16)."""
    return torch.where(bits >= 0x8000, bits - 0x10000, bits).to(torch.int16).view(torch.bfloat16)


BASE_MIN, BASE_MAX = 1, 239
"""The window never holds exponent 0 (zeros, subnormals) or 255 (inf, NaN): those are always
escapes, so every in-window weight is a normal number and the GEMMs' base-free decode
(``kernels/w12/triton.py``) is exact."""


def choose_base(w2: torch.Tensor) -> int:
    """Start of the 16-wide exponent window covering most weights (lowest on ties), in
    [BASE_MIN, BASE_MAX]."""
    hist = torch.zeros(256, dtype=torch.int64, device=w2.device)
    for rows in row_chunks(*w2.shape):
        hist += torch.bincount(((bits_of(w2[rows]) >> 7) & 0xFF).flatten(), minlength=256)
    hist[0] = hist[255] = 0  # never inside the window
    csum = torch.cat([hist.new_zeros(1), hist.cumsum(0)])
    covered = csum[WINDOW:] - csum[:-WINDOW]  # [241]: weights in [b, b + 15]
    return BASE_MIN + int(torch.argmax(covered[BASE_MIN:BASE_MAX + 1]))


def decoded_bits(bits: torch.Tensor, base: int) -> torch.Tensor:
    """What the planes decode to: sign and mantissa kept, exponent clamped into the window."""
    exp = (bits >> 7) & 0xFF
    return (bits & 0x807F) | (exp.clamp(base, base + WINDOW - 1) << 7)


def escapes(w2: torch.Tensor, base: int) -> tuple[torch.Tensor, ...]:
    """The out-of-band CSR of ``w2 [R, K]``: ``row_ptr, esc_col, esc_bits, esc_delta``."""
    counts, cols, vals, deltas = [], [], [], []
    for rows in row_chunks(*w2.shape):
        bits = bits_of(w2[rows])
        exp = (bits >> 7) & 0xFF
        outside = (exp < base) | (exp > base + WINDOW - 1)
        counts.append(outside.sum(dim=1))
        exact = bits[outside]
        cols.append(outside.nonzero()[:, 1].to(torch.int32))
        vals.append(bf16_of(exact).view(torch.int16))
        deltas.append(bf16_of(exact).float() - bf16_of(decoded_bits(exact, base)).float())
    dev = w2.device
    row_ptr = torch.zeros(w2.shape[0] + 1, dtype=torch.int64, device=dev)
    if counts:
        row_ptr[1:] = torch.cat(counts).cumsum(0)
    cat = lambda xs, dtype: torch.cat(xs) if xs else torch.zeros(0, dtype=dtype, device=dev)
    return (row_ptr.to(torch.int32), cat(cols, torch.int32), cat(vals, torch.int16),
            cat(deltas, torch.float32))


def w12_pack_ref(w: torch.Tensor, config: dict | None = None) -> W12Tensor:
    """Pack a bf16 tensor of any shape into a :class:`W12Tensor` (``config`` is ignored)."""
    w2 = as_rows(w)
    r, k = w2.shape
    k2 = (k + 1) // 2
    base = choose_base(w2)  # BASE_MIN for an empty tensor
    sm = torch.zeros((r, 2 * k2), dtype=torch.uint8, device=w.device)
    nib = torch.zeros((r, k2), dtype=torch.uint8, device=w.device)
    for rows in row_chunks(r, k):
        bits = bits_of(w2[rows])
        full = torch.zeros((bits.shape[0], 2 * k2), dtype=torch.int32, device=w.device)
        full[:, :k] = bits  # the padding column: bits 0, so code 0 (base >= 1)
        code = (((full >> 7) & 0xFF) - base).clamp(0, WINDOW - 1)
        sm[rows] = (((code & 1) << 7) | (full & 0x7F)).to(torch.uint8)
        sign, high = (full >> 15) & 1, code >> 1
        nib[rows] = ((sign[:, :k2] << 7) | high[:, :k2]
                     | (sign[:, k2:] << 6) | (high[:, k2:] << 3)).to(torch.uint8)
    return W12Tensor(w.shape, base, block_planes(sm, nib), *escapes(w2, base))


def w12_unpack_ref(packed: W12Tensor, config: dict | None = None) -> torch.Tensor:
    """The bf16 tensor ``packed`` encodes, bit for bit (``config`` is ignored)."""
    r, k = packed.rows, packed.cols
    out = torch.zeros((r, k), dtype=torch.int32, device=packed.device)
    sm_all, nib_all = packed.row_major()
    for rows in row_chunks(r, k):
        sm = sm_all[rows].to(torch.int32)
        nib = nib_all[rows].to(torch.int32)
        sign = torch.cat([nib >> 7, (nib >> 6) & 1], dim=1)
        code = (torch.cat([nib & 7, (nib >> 3) & 7], dim=1) << 1) | (sm >> 7)
        bits = (sign << 15) | ((code + packed.base) << 7) | (sm & 0x7F)
        out[rows] = bits[:, :k]
    apply_escape_bits(out, packed)
    return bf16_of(out).reshape(packed.shape)


def apply_escape_bits(bits: torch.Tensor, packed: W12Tensor) -> None:
    """Overwrite escapes in ``bits [R, K]`` (int32 or int16 view) with their exact bf16 bits."""
    if packed.num_escapes == 0:
        return
    counts = (packed.row_ptr[1:] - packed.row_ptr[:-1]).long()
    rows = torch.repeat_interleave(torch.arange(packed.rows, device=bits.device), counts)
    exact = packed.esc_bits.to(bits.dtype)
    if bits.dtype == torch.int32:
        exact = exact & 0xFFFF
    bits[rows, packed.esc_col.long()] = exact
