"""The q/k norm + rotary kernel equals its reference under the Triton interpreter (strided q and
k views as split from a merged projection, partial and full rotary, both norm conventions), and
the reference is the model's own ops (norm, then apply_rope)."""

import pytest
import torch

from specpilot.engines.models.layers import apply_rope
from specpilot.engines.models.layers import rms_norm
from specpilot.engines.models.layers import rope_cos_sin
from specpilot.engines.models.layers import rope_inv_freq
from specpilot.engines.models.layers import zero_centered_rms_norm
from specpilot.kernels.qk_norm_rope import qk_norm_rope
from specpilot.kernels.qk_norm_rope.reference import qk_norm_rope_ref


def inputs(batch, tokens, hq, hk, dim, rot, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    width = 2 * hq * dim + 2 * hk * dim + 3
    merged = torch.randn(batch, tokens, width, generator=g).to(dtype) * 2
    # q interleaved with a gate per head (Qwen3.5's gated attention), then k: strided views
    q = merged[..., :2 * hq * dim].view(batch, tokens, hq, 2 * dim)[..., :dim]
    k = merged[..., 2 * hq * dim:2 * hq * dim + hk * dim].view(batch, tokens, hk, dim)
    weights = [(torch.randn(dim, generator=g) * 0.2).to(dtype) for _ in range(2)]
    positions = torch.randint(0, 500, (batch, tokens), generator=g)
    cos, sin = rope_cos_sin(rope_inv_freq(10000.0, rot), positions, dtype)
    return q, k, weights, cos, sin


@pytest.mark.parametrize("batch,tokens,hq,hk,dim,rot", [(1, 1, 3, 1, 32, 8), (2, 3, 2, 2, 24, 24),
                                                        (1, 4, 4, 2, 16, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset,round_first", [(1.0, False), (0.0, True)])
def test_equals_reference(batch, tokens, hq, hk, dim, rot, dtype, offset, round_first):
    q, k, (wq, wk), cos, sin = inputs(batch, tokens, hq, hk, dim, rot, dtype, seed=dim + tokens)
    got = qk_norm_rope(q, k, wq, wk, 1e-6, cos, sin, offset, round_first)
    want = qk_norm_rope_ref(q, k, wq, wk, 1e-6, cos, sin, offset, round_first)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == dtype and g.is_contiguous()
        if dtype == torch.float32:
            assert torch.allclose(g, w, rtol=1e-5, atol=1e-5)
        else:  # the rotation rounds once here, three times eagerly; the interpreter truncates
            assert torch.allclose(g.float(), w.float(), rtol=2 ** -5, atol=2 ** -5)


def test_reference_is_the_models_norm_then_rope():
    q, k, (wq, wk), cos, sin = inputs(1, 2, 2, 1, 32, 8, torch.bfloat16, seed=0)
    got_q, got_k = qk_norm_rope_ref(q, k, wq, wk, 1e-6, cos, sin, 1.0, False)
    assert torch.equal(got_q, apply_rope(zero_centered_rms_norm(q, wq, 1e-6), cos, sin))
    got_q, got_k = qk_norm_rope_ref(q, k, wq, wk, 1e-6, cos, sin, 0.0, True)
    assert torch.equal(got_k, apply_rope(rms_norm(k, wk, 1e-6), cos, sin))


def test_rejects_an_odd_rotary_width():
    q, k, (wq, wk), cos, sin = inputs(1, 1, 1, 1, 16, 8, torch.float32, seed=1)
    with pytest.raises(ValueError, match="do not match"):
        qk_norm_rope(q, k, wq, wk, 1e-6, cos[..., :7], sin[..., :7], 1.0, False)
