"""The chunked gated delta rule (what training runs) equals the token-by-token reference, values and
gradients, on odd lengths, grouped value heads and a non-zero initial state."""

import pytest
import torch

from specpilot.kernels.gated_delta_rule.chunked import gated_delta_rule_chunked
from specpilot.kernels.gated_delta_rule.reference import gated_delta_rule_ref


def _inputs(num_tokens, k_heads=2, v_heads=4, dk=8, dv=6, batch=2, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k = rand(batch, num_tokens, k_heads, dk), rand(batch, num_tokens, k_heads, dk)
    v = rand(batch, num_tokens, v_heads, dv)
    g = -torch.rand(batch, num_tokens, v_heads, generator=gen, dtype=torch.float64) * 2.0
    beta = torch.rand(batch, num_tokens, v_heads, generator=gen, dtype=torch.float64)
    state = rand(batch, v_heads, dk, dv) * 0.5
    return q, k, v, g, beta, state


@pytest.mark.parametrize("num_tokens,chunk", [(37, 16), (16, 16), (5, 64), (64, 8)])
def test_chunked_equals_token_reference(num_tokens, chunk):
    q, k, v, g, beta, state = _inputs(num_tokens)
    ref_out, ref_state, _ = gated_delta_rule_ref(q, k, v, g, beta, state)
    out, final = gated_delta_rule_chunked(q, k, v, g, beta, state, chunk_size=chunk)
    assert out.dtype == v.dtype and out.shape == ref_out.shape
    torch.testing.assert_close(out, ref_out.to(out.dtype), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(final.double(), ref_state.double(), rtol=1e-6, atol=1e-6)


def test_chunked_gradients_equal_token_reference():
    inputs = [x.requires_grad_() for x in _inputs(21, seed=1)]
    weights = torch.randn(2, 21, 4, 6, generator=torch.Generator().manual_seed(2),
                          dtype=torch.float64)

    def grads(fn):
        out, final = fn(*inputs)[:2]
        loss = (out * weights).sum() + final.double().pow(2).sum()
        return torch.autograd.grad(loss, inputs)

    ref = grads(gated_delta_rule_ref)
    chunked = grads(lambda *x: gated_delta_rule_chunked(*x, chunk_size=8))
    for a, b in zip(chunked, ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # both compute in fp32
