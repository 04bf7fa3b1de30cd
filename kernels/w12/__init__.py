"""W12: lossless 12-bit bf16 weights (a byte + 4 bits per weight, 4-bit exponent code, escapes).

Engine entry point::

    from specpilot.kernels import w12
    packed = w12.pack(weight)            # on load (GPU: Triton encode), or offline + state_dict()
    assert torch.equal(packed.unpack().view(torch.int16), weight.view(torch.int16))
    packed.nbytes, packed.escape_rate    # ~1.5 B/weight + escapes

Layout and escape rules: :mod:`specpilot.kernels.w12.format`.
"""

import torch

from specpilot.kernels.w12.format import W12Tensor
from specpilot.kernels.w12.reference import w12_pack_ref
from specpilot.kernels.w12.reference import w12_unpack_ref

__all__ = ["W12Tensor", "pack", "unpack", "w12_pack_ref", "w12_unpack_ref"]


def pack(w: torch.Tensor, order: str = "rows") -> W12Tensor:
    """Pack bf16 ``w`` (any shape); the Triton encoder on GPU, torch on CPU. Bit-exact always.
    ``order``: the planes' byte order, ``"rows"`` or ``"frag"`` (:mod:`.format`)."""
    if w.device.type == "cuda":
        from specpilot.kernels.w12.triton import w12_pack

        return w12_pack(w).with_order(order)
    return w12_pack_ref(w).with_order(order)


def unpack(packed: W12Tensor) -> torch.Tensor:
    """The bf16 tensor ``packed`` encodes, bit for bit."""
    return packed.unpack()
