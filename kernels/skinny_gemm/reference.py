"""Pure-torch reference of the skinny GEMM: ``out[m, n] = sum_k x[m, k] * w[n, k]`` in fp32."""

import torch


def skinny_gemm_ref(x: torch.Tensor, weight: torch.Tensor, out_dtype: torch.dtype | None = None,
                    config: dict | None = None) -> torch.Tensor:
    """``x [M, K]`` bf16 times ``weight [N, K]`` bf16 transposed -> ``[M, N]``, fp32 accumulation.

    Args:
        x: activations ``[M, K]``.
        weight: ``[N, K]`` (an ``nn.Linear`` weight; fused q/k/v/gate or gate/up weights are simply
            concatenated along N).
        out_dtype: output dtype (default ``x.dtype``); float32 keeps the unrounded accumulator.
        config: accepted and ignored, so the reference and the Triton launcher are interchangeable.
    """
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"expected x [M, K] and weight [N, K], got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    out = x.float() @ weight.float().T
    return out.to(out_dtype or x.dtype)
