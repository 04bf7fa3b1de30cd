"""The residual add + RMSNorm kernel equals its reference (the eager ops) under the Triton
interpreter, for both weight conventions; the stored sum is the rounded sum, bit-exact."""

import pytest
import torch

from specpilot.engines.models.layers import rms_norm
from specpilot.engines.models.layers import zero_centered_rms_norm
from specpilot.kernels.add_rms_norm import add_rms_norm
from specpilot.kernels.add_rms_norm.reference import add_rms_norm_ref


@pytest.mark.parametrize("shape", [(1, 1, 37), (2, 3, 64), (5, 200)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset,round_first", [(1.0, False), (0.0, True)])
def test_equals_reference(shape, dtype, offset, round_first):
    g = torch.Generator().manual_seed(shape[-1])
    h, delta = (torch.randn(*shape, generator=g).to(dtype) * 3 for _ in range(2))
    weight = (torch.randn(shape[-1], generator=g) * 0.1).to(dtype)
    s, out = add_rms_norm(h, delta, weight, 1e-6, offset, round_first)
    ref_s, ref_out = add_rms_norm_ref(h, delta, weight, 1e-6, offset, round_first)
    assert s.shape == out.shape == h.shape and out.dtype == dtype
    if dtype == torch.float32:
        assert torch.equal(s, ref_s)
        assert torch.allclose(out, ref_out, rtol=1e-5, atol=1e-5)
        return
    # bf16: the triton 3.6 interpreter converts fp32 to bf16 by truncation (the GPU rounds to
    # nearest even, as torch does), so each rounding may land one bf16 step (2^-7) lower: the sum,
    # the output, and the normed value too when round_first
    assert torch.allclose(s.float(), ref_s.float(), rtol=2 ** -7, atol=0)
    assert torch.allclose(out.float(), ref_out.float(), rtol=2 ** -5, atol=1e-2)


def test_reference_is_the_models_norm_of_the_sum():
    g = torch.Generator().manual_seed(0)
    h, delta = (torch.randn(3, 48, generator=g).bfloat16() for _ in range(2))
    weight = torch.randn(48, generator=g).bfloat16()
    s, out = add_rms_norm_ref(h, delta, weight, 1e-6, 1.0, False)
    assert torch.equal(s, h + delta)
    assert torch.equal(out, zero_centered_rms_norm(h + delta, weight, 1e-6))
    _, out = add_rms_norm_ref(h, delta, weight, 1e-6, 0.0, True)
    assert torch.equal(out, rms_norm(h + delta, weight, 1e-6))


def test_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="do not match"):
        add_rms_norm(torch.zeros(2, 8), torch.zeros(2, 9), torch.zeros(8), 1e-6, 1.0, False)
