"""The Gated-DeltaNet output norm kernel equals its reference (the model's eager function) under
the Triton interpreter, with a gate that is a strided view of a wider projection."""

import pytest
import torch

from specpilot.engines.models.layers import gated_rms_norm as model_gated_rms_norm
from specpilot.kernels.gated_rms_norm import gated_rms_norm
from specpilot.kernels.gated_rms_norm.reference import gated_rms_norm_ref


@pytest.mark.parametrize("rows,dim", [(1, 32), (37, 24), (48, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_reference(rows, dim, dtype):
    g = torch.Generator().manual_seed(rows)
    x = (torch.randn(rows, dim, generator=g) * 2).to(dtype)
    gate = (torch.randn(rows, 3 * dim, generator=g) * 3).to(dtype)[:, dim:2 * dim]
    weight = (1 + 0.1 * torch.randn(dim, generator=g)).to(dtype)
    got, want = gated_rms_norm(x, gate, weight, 1e-6), gated_rms_norm_ref(x, gate, weight, 1e-6)
    assert got.shape == want.shape and got.dtype == dtype
    if dtype == torch.float32:
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    else:  # three roundings to bf16, each a truncation under the triton 3.6 interpreter
        assert torch.allclose(got.float(), want.float(), rtol=2 ** -5, atol=2 ** -8)


def test_reference_is_the_models_function():
    g = torch.Generator().manual_seed(0)
    x, gate = (torch.randn(5, 16, generator=g).bfloat16() for _ in range(2))
    weight = torch.randn(16, generator=g).bfloat16()
    assert torch.equal(gated_rms_norm_ref(x, gate, weight, 1e-6),
                       model_gated_rms_norm(x, gate, weight, 1e-6))
