"""The W12 container: a lossless 12-bit encoding of a bf16 tensor, 1.5 bytes per weight + escapes.

Encoding of a bf16 weight ``s | e (8 bits) | m (7 bits)``, viewed as ``[R, K]`` (R = all leading
dims), in two logical planes (``K2 = ceil(K / 2)``):

- ``code = clamp(e - base, 0, 15)`` (bits ``c3 c2 c1 c0``), the exponent relative to the window.
- ``sm``, uint8 ``[R, 2*K2]``: the byte ``c0 << 7 | m`` of column c (the low byte of the bf16 the
  kernels decode, :mod:`specpilot.kernels.w12.triton`).
- ``nib``, uint8 ``[R, K2]``: byte j holds the sign and ``c3 c2 c1`` of column j in bits 7 and
  2..0, and those of column ``j + K2`` in bits 6 and 5..3. Pairing column j with j + K2 (not 2j
  with 2j + 1) lets a kernel load ``sm[:, j0:j0+BK]``, ``sm[:, K2+j0:...]`` and
  ``nib[:, j0:j0+BK]`` as three equally shaped tiles and decode them elementwise with no
  interleave: one tile from the low bits, one from the high. Where the bits sit, four weights'
  decoded high bytes take one logic op on their 32-bit ``nib`` word (low half) or four (high half:
  two shifts, two ``lop3``). If K is odd the last ``sm`` column is padding (decodes to a finite
  value; kernels mask its activation).

Stored blocked (``planes``, uint8 ``[ceil(R/BR), ceil(K2/BP), 3, BR, BP]``; ``BR`` = 4 rows, ``BP``
up to 512 pair columns, :func:`block_pairs_for`): block ``(i, b)`` holds, one after the other, the
``[BR, BP]`` tiles of rows ``i*BR ...`` and pair columns ``b*BP ...`` of ``nib``, of the low half
``sm[:, :K2]`` and of the high half ``sm[:, K2:]``; rows and pair columns past the tensor are zero
padding. A GEMV step of ``BR`` rows and ``BP`` pairs then reads one contiguous run of ``3*BR*BP``
bytes, where row-major planes give it ``3*BR`` runs of ``BP``: measured on the H200 with the same
unmasked decode loop, gate_up 70.7 -> 66.1 us and down_proj 46.2 -> 36.7 us at 4 x 512
(``experiments/results/h200-2026-11-30-w12-anatomy-layout.json``). A K step of ``BLOCK_K`` pairs
dividing ``BP`` is contiguous in each row (``plane_rows`` and ``plane_cols`` in
:mod:`specpilot.kernels.w12.triton` give the offsets).

Plane order ``"frag"`` (``W12Tensor.order``; ``pack(w, order="frag")``; saved as ``frag_planes``
instead of ``planes``, so an older reader refuses it): blocks of 16 rows x 32
pairs, each block's bytes stored in the order the ``mma.sync`` A operand's registers hold them
(:func:`frag_planes`): byte ``i = (g, t, e3, e2, e1 e0)`` (bits from high to low) of a block is
row ``8 e2 + g``, pair column ``16 e3 + 4 t + (e1 e0)``. So one 16-byte load per lane and plane
is lane ``(g, t)``'s share of the block's A fragment, and a kernel's tile of W x FC blocks goes
from global memory straight to its registers with no layout conversion
(:mod:`specpilot.kernels.w12f_gemm`). The bits of every byte are the same in both orders.

- ``base``: per tensor, the start of the 16-wide exponent window ``[base, base + 15]`` that covers
  the most weights (lowest such base on ties; ``1 <= base <= 239``, so exponents 0 and 255 --
  zeros, subnormals, inf, NaN -- are always escapes and every in-window weight is a normal number).
- Escapes (weights whose exponent lies outside the window: tiny magnitudes, exact zeros,
  subnormals, outliers, inf/NaN): stored out of band as a per-row CSR, ``row_ptr [R + 1]``,
  ``esc_col [E]``, ``esc_bits [E]`` (the exact bf16 bits) and ``esc_delta [E]`` = fp32(exact) -
  fp32(decoded), where "decoded" is what the planes give for that weight (its exponent clamped into
  the window).

``unpack`` decodes the planes and overwrites the escapes with their exact bits, so
``unpack(pack(w))`` is bit-identical to ``w`` for every bf16 tensor (±0, subnormals, inf, NaN
payloads included). How the GEMM applies escapes, and what that does to summation order, is in
:mod:`specpilot.kernels.w12_gemm.triton`.
"""

import dataclasses
import math

import torch

BLOCK_ROWS = 4
BLOCK_PAIRS = 512
FRAG_ROWS = 16
FRAG_PAIRS = 32
PLANE_ORDERS = ("rows", "frag")
GEMM_FOR_ORDER = {"rows": "w12_gemm", "frag": "w12f_gemm"}
"""The GEMM op (``specpilot.kernels.<op>``) that reads each plane order."""
BIT_LAYOUT = 2
"""Which bits the ``sm`` and ``nib`` bytes hold, saved with every packed tensor: 1 (never saved)
was the sign in ``sm`` and the whole code in a nibble; 2 is the layout above."""


def block_pairs_for(k2: int) -> int:
    """BP for ``K2`` pair columns: the power of two in [64, :data:`BLOCK_PAIRS`] that pads K2 least
    (the largest on ties: 512 for Qwen3.8-27B's K2 = 2560, 3072, 8704; 256 for Muse-Glimmer-30B's
    3328 and 9984; 64 for 432, padded to 448); below 64 pairs, K2 rounded up to a power of two, at
    least 16 (``tl.dot``'s minimum K)."""
    if k2 < 64:
        return 1 << max(4, (k2 - 1).bit_length())
    sizes = [BLOCK_PAIRS >> i for i in range(BLOCK_PAIRS.bit_length()) if BLOCK_PAIRS >> i >= 64]
    return min(sizes, key=lambda bp: -(-k2 // bp) * bp)  # min keeps the first (largest) on ties


def block_planes(sm: torch.Tensor, nib: torch.Tensor, block_rows: int = BLOCK_ROWS,
                 block_pairs: int | None = None) -> torch.Tensor:
    """Row-major ``sm [R, 2*K2]`` and ``nib [R, K2]`` -> blocked ``planes`` (zero padded;
    ``block_pairs`` defaults to :func:`block_pairs_for`)."""
    r, k2 = nib.shape
    block_pairs = block_pairs or block_pairs_for(k2)
    rb, kb = -(-r // block_rows), -(-k2 // block_pairs)
    out = torch.zeros((3, rb * block_rows, kb * block_pairs), dtype=torch.uint8, device=nib.device)
    out[0, :r, :k2] = nib
    out[1, :r, :k2] = sm[:, :k2]
    out[2, :r, :k2] = sm[:, k2:]
    return (out.view(3, rb, block_rows, kb, block_pairs).permute(1, 3, 0, 2, 4).contiguous())


def unblock_planes(planes: torch.Tensor, r: int, k2: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`block_planes`: ``(sm [R, 2*K2], nib [R, K2])``, row-major copies."""
    rb, kb, _, br, bp = planes.shape
    flat = planes.permute(2, 0, 3, 1, 4).reshape(3, rb * br, kb * bp)[:, :r, :k2]
    return torch.cat([flat[1], flat[2]], dim=1), flat[0].contiguous()


def frag_planes(sm: torch.Tensor, nib: torch.Tensor) -> torch.Tensor:
    """Row-major ``sm [R, 2*K2]`` and ``nib [R, K2]`` -> ``planes`` in fragment order (zero
    padded to blocks of :data:`FRAG_ROWS` x :data:`FRAG_PAIRS`)."""
    planes = block_planes(sm, nib, FRAG_ROWS, FRAG_PAIRS)
    rb, kb = planes.shape[:2]
    # rows (e2, g), pairs (e3, t, e1 e0) -> bytes (g, t, e3, e2, e1 e0)
    t = planes.view(rb, kb, 3, 2, 8, 2, 4, 4).permute(0, 1, 2, 4, 6, 5, 3, 7)
    return t.contiguous().view(rb, kb, 3, FRAG_ROWS, FRAG_PAIRS)


def unfrag_planes(planes: torch.Tensor) -> torch.Tensor:
    """Inverse of the permutation in :func:`frag_planes`: the same blocks, rows order."""
    rb, kb = planes.shape[:2]
    t = planes.reshape(rb, kb, 3, 8, 4, 2, 2, 4).permute(0, 1, 2, 6, 3, 5, 4, 7)
    return t.contiguous().view(rb, kb, 3, FRAG_ROWS, FRAG_PAIRS)


@dataclasses.dataclass(frozen=True, eq=False)
class W12Tensor:
    """A packed bf16 tensor; see the module docstring for the layout. Build with :func:`pack`."""

    shape: torch.Size
    base: int
    planes: torch.Tensor  # uint8 [ceil(R/BR), ceil(K2/BP), 3, BR, BP]
    row_ptr: torch.Tensor  # int32 [R + 1]
    esc_col: torch.Tensor  # int32 [E]
    esc_bits: torch.Tensor  # int16 [E]
    esc_delta: torch.Tensor  # float32 [E]
    order: str = "rows"  # "frag": blocks of 16 x 32 in mma fragment order (module docstring)

    @property
    def rows(self) -> int:
        """R: the product of all leading dims (1 for a 0-d or 1-d tensor)."""
        return math.prod(self.shape[:-1]) if len(self.shape) else 1

    @property
    def cols(self) -> int:
        """K: the last dim (1 for a 0-d tensor)."""
        return self.shape[-1] if len(self.shape) else 1

    @property
    def k_half(self) -> int:
        """K2 = ceil(K / 2), the nibble plane's width."""
        return (self.cols + 1) // 2

    @property
    def block_rows(self) -> int:
        """BR: rows per block of ``planes``."""
        return self.planes.shape[3]

    @property
    def block_pairs(self) -> int:
        """BP: pair columns per block of ``planes``."""
        return self.planes.shape[4]

    def row_major(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(sm [R, 2*K2], nib [R, K2])``: the logical planes, as row-major copies."""
        planes = unfrag_planes(self.planes) if self.order == "frag" else self.planes
        return unblock_planes(planes, self.rows, self.k_half)

    def with_order(self, order: str) -> "W12Tensor":
        """The same weight with its planes in ``order`` (a copy of the planes; escapes shared)."""
        if order not in PLANE_ORDERS:
            raise ValueError(f"W12 plane order must be one of {PLANE_ORDERS}, got {order!r}")
        if order == self.order:
            return self
        sm, nib = self.row_major()
        planes = frag_planes(sm, nib) if order == "frag" else block_planes(sm, nib)
        return dataclasses.replace(self, planes=planes, order=order)

    @property
    def dtype(self) -> torch.dtype:
        """Always bfloat16: the dtype ``unpack`` returns."""
        return torch.bfloat16

    @property
    def device(self) -> torch.device:
        """Where the packed buffers live."""
        return self.planes.device

    @property
    def num_escapes(self) -> int:
        """E: weights stored out of band."""
        return self.esc_col.numel()

    @property
    def escape_rate(self) -> float:
        """Fraction of weights stored out of band (0.0 for an empty tensor)."""
        numel = math.prod(self.shape)
        return self.num_escapes / numel if numel else 0.0

    @property
    def nbytes(self) -> int:
        """Bytes of every packed buffer (planes + escape CSR): what a GEMM call must stream, plus
        the planes' zero padding (rows order: none where K2 is a multiple of 64, under 64 pairs
        per row else; frag order: rows to a multiple of 16, pairs to a multiple of 32)."""
        return sum(t.numel() * t.element_size() for t in self._buffers().values())

    def _buffers(self) -> dict[str, torch.Tensor]:
        return {"planes": self.planes, "row_ptr": self.row_ptr, "esc_col": self.esc_col,
                "esc_bits": self.esc_bits, "esc_delta": self.esc_delta}

    def unpack(self) -> torch.Tensor:
        """The original bf16 tensor, bit for bit (Triton decode on GPU, torch on CPU)."""
        if self.device.type == "cuda":
            from specpilot.kernels.w12.triton import w12_unpack

            return w12_unpack(self.with_order("rows"))
        from specpilot.kernels.w12.reference import w12_unpack_ref

        return w12_unpack_ref(self)

    def to(self, device: torch.device | str) -> "W12Tensor":
        """A copy of every buffer on ``device``."""
        moved = {k: v.to(device) for k, v in self._buffers().items()}
        return dataclasses.replace(self, **moved)

    def clone(self) -> "W12Tensor":
        """A copy with its own buffers (e.g. rotating weight copies in benchmarks)."""
        return dataclasses.replace(self, **{k: v.clone() for k, v in self._buffers().items()})

    def row_blocks(self, max_weights: int) -> tuple["W12Tensor", ...]:
        """Consecutive row blocks of a 2-D tensor, each of at most ``max_weights`` weights (one
        block of ``planes`` at least), so a caller can decode a big weight a block at a time.

        The cuts fall on blocks of ``planes``, so the planes and escape lists are views; only each
        block's ``row_ptr`` is a new (re-based) tensor. Reads ``row_ptr`` at the cuts once (one
        host sync), so call it at load time.
        """
        if len(self.shape) != 2:
            raise ValueError(f"row_blocks needs a 2-D W12 tensor, got shape {tuple(self.shape)}")
        r, k = self.shape
        br = self.block_rows
        fit = max(1, max_weights // max(k, 1))
        if r <= fit:
            return (self,)
        step = max(br, fit // br * br)
        cuts = [*range(0, r, step), r]
        ptr = self.row_ptr[cuts].tolist()
        blocks = []
        for r0, r1, e0, e1 in zip(cuts, cuts[1:], ptr, ptr[1:]):
            blocks.append(W12Tensor(
                torch.Size((r1 - r0, k)), self.base, self.planes[r0 // br:-(-r1 // br)],
                self.row_ptr[r0:r1 + 1] - e0, self.esc_col[e0:e1], self.esc_bits[e0:e1],
                self.esc_delta[e0:e1], self.order))
        return tuple(blocks)

    def state_dict(self, prefix: str = "") -> dict[str, torch.Tensor]:
        """Tensors only (safetensors-friendly) for offline packing; see :meth:`from_state_dict`.
        Fragment-order planes are saved as ``frag_planes``, so a reader that knows only rows order
        fails on the missing ``planes`` instead of decoding them in the wrong order."""
        out = {prefix + k: v for k, v in self._buffers().items()}
        if self.order == "frag":
            out[prefix + "frag_planes"] = out.pop(prefix + "planes")
        out[prefix + "shape"] = torch.tensor(list(self.shape), dtype=torch.int64)
        out[prefix + "base"] = torch.tensor([self.base], dtype=torch.int64)
        out[prefix + "bit_layout"] = torch.tensor([BIT_LAYOUT], dtype=torch.int64)
        return out

    @classmethod
    def from_state_dict(cls, state: dict[str, torch.Tensor], prefix: str = "") -> "W12Tensor":
        """Rebuild a W12Tensor saved with :meth:`state_dict` (validates the layout)."""
        order = "frag" if prefix + "frag_planes" in state else "rows"
        if order == "rows" and prefix + "planes" not in state and prefix + "sm" in state:
            raise ValueError(f"{prefix or 'the'} W12 state has row-major 'sm'/'nib' planes, from "
                             "before the blocked layout: pack the weight again")
        layout = state.get(prefix + "bit_layout")
        layout = 1 if layout is None else int(layout.reshape(-1)[0])
        if layout != BIT_LAYOUT:
            raise ValueError(f"{prefix or 'the'} W12 state has bit layout {layout} (1: the sign "
                             f"in the sm byte), this version reads {BIT_LAYOUT}: pack the "
                             "weight again")
        shape = torch.Size(int(d) for d in state[prefix + "shape"].tolist())
        planes = state[prefix + ("frag_planes" if order == "frag" else "planes")]
        packed = cls(shape=shape, base=int(state[prefix + "base"][0]), planes=planes,
                     **{k: state[prefix + k] for k in ("row_ptr", "esc_col", "esc_bits",
                                                       "esc_delta")},
                     order=order)
        packed.validate()
        return packed

    def validate(self) -> None:
        """Raise ValueError if the buffers do not fit ``shape`` (e.g. a corrupt file)."""
        r, k2 = self.rows, self.k_half
        if self.planes.dim() != 5 or self.planes.shape[2] != 3:
            raise ValueError(f"W12Tensor.planes: expected uint8 [Rb, Kb, 3, BR, BP], got "
                             f"{tuple(self.planes.shape)}")
        br, bp = self.block_rows, self.block_pairs
        if self.order not in PLANE_ORDERS:
            raise ValueError(f"W12Tensor.order must be one of {PLANE_ORDERS}, got "
                             f"{self.order!r}")
        if self.order == "frag" and (br, bp) != (FRAG_ROWS, FRAG_PAIRS):
            raise ValueError(f"W12Tensor.planes: the frag order takes blocks of {FRAG_ROWS} rows "
                             f"x {FRAG_PAIRS} pairs, got {br} x {bp}")
        if br < 1 or bp < 1 or bp & (bp - 1):
            raise ValueError(f"W12Tensor.planes: blocks of {br} rows x {bp} pairs (BP must be a "
                             "power of two)")
        expect = {"planes": ((-(-r // br), -(-k2 // bp), 3, br, bp), torch.uint8),
                  "row_ptr": ((r + 1,), torch.int32)}
        for name, (shape, dtype) in expect.items():
            t = getattr(self, name)
            if tuple(t.shape) != shape or t.dtype != dtype:
                raise ValueError(f"W12Tensor.{name}: expected {dtype} {shape}, got {t.dtype} "
                                 f"{tuple(t.shape)}")
        e = int(self.row_ptr[-1])
        for name, dtype in (("esc_col", torch.int32), ("esc_bits", torch.int16),
                            ("esc_delta", torch.float32)):
            t = getattr(self, name)
            if tuple(t.shape) != (e,) or t.dtype != dtype:
                raise ValueError(f"W12Tensor.{name}: expected {dtype} ({e},), got {t.dtype} "
                                 f"{tuple(t.shape)}")
        if not 1 <= self.base <= 239:
            raise ValueError(f"W12Tensor.base must be in [1, 239], got {self.base} (a tensor "
                             "packed before exponents 0 and 255 were always escapes: pack it "
                             "again)")
