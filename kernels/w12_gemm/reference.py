"""Pure-torch reference of the W12 GEMM: unpack the weight, then an fp32-accumulated bf16 GEMM."""

import torch

from specpilot.kernels.w12.format import W12Tensor


def w12_gemm_ref(x: torch.Tensor, packed: W12Tensor, out_dtype: torch.dtype | None = None,
                 config: dict | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 times the W12 weight ``[N, K]`` transposed -> ``[M, N]``, fp32
    accumulation.

    ``config`` is accepted and ignored, so the reference and the Triton launcher are
    interchangeable.
    """
    if len(packed.shape) != 2 or x.dim() != 2 or x.shape[1] != packed.shape[1]:
        raise ValueError(f"expected x [M, K] and a 2-D W12 weight [N, K], got "
                         f"{tuple(x.shape)} and {tuple(packed.shape)}")
    out = x.float() @ packed.unpack().float().T
    return out.to(out_dtype or x.dtype)
