"""The one-launch per-token-state gated delta rule equals the token reference under the Triton
interpreter: outputs, every step's state, odd head dims, grouped value heads, a strided view of a
layer-stacked state, and a reserved buffer it must fill in place."""

import pytest
import torch

from specpilot.kernels.gated_delta_rule.reference import gated_delta_rule_ref
from specpilot.kernels.gated_delta_rule.steps import gated_delta_rule_steps


def _inputs(batch, tokens, k_heads, v_heads, dk, dv, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    q, k, v = rand(batch, tokens, k_heads, dk), rand(batch, tokens, k_heads, dk), \
        rand(batch, tokens, v_heads, dv)
    g = (-torch.rand(batch, tokens, v_heads, generator=gen) * 2.0).float()
    beta = torch.rand(batch, tokens, v_heads, generator=gen).to(dtype)
    state = torch.randn(batch, v_heads, dk, dv, generator=gen) * 0.5
    return q, k, v, g, beta, state


@pytest.mark.parametrize("batch,tokens,k_heads,v_heads,dk,dv,dtype,block_v", [
    (2, 5, 2, 4, 8, 6, torch.float32, 4), (1, 8, 1, 3, 16, 16, torch.float32, 16),
    (3, 1, 2, 2, 5, 7, torch.float32, 8), (2, 4, 1, 2, 8, 8, torch.bfloat16, 8)])
def test_steps_kernel_equals_reference(batch, tokens, k_heads, v_heads, dk, dv, dtype, block_v):
    q, k, v, g, beta, state = _inputs(batch, tokens, k_heads, v_heads, dk, dv, dtype)
    ref_out, ref_final, ref_steps = gated_delta_rule_ref(q, k, v, g, beta, state, keep_steps=True)
    out, final, steps = gated_delta_rule_steps(q, k, v, g, beta, state, block_v=block_v)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    assert out.dtype == v.dtype
    torch.testing.assert_close(out.float(), ref_out.float(), **tol)
    torch.testing.assert_close(steps, ref_steps, rtol=1e-5, atol=1e-5)
    assert torch.equal(final, steps[:, -1])
    torch.testing.assert_close(final, ref_final, rtol=1e-5, atol=1e-5)


def test_steps_fill_a_reserved_buffer_from_a_stacked_state_view():
    """The engine's case: the initial state is rows of one layer of a layer-stacked tensor, and the
    per-token states go into rows of a reserved buffer; rows outside the view stay untouched."""
    q, k, v, g, beta, _ = _inputs(2, 3, 1, 2, 8, 8, torch.float32, seed=3)
    stack = torch.randn(2, 4, 2, 8, 8)  # [L, B_max, HV, K, V]
    initial = stack[1, :2]
    buffer = torch.full((4, 3, 2, 8, 8), -5.0)
    ref_out, _, ref_steps = gated_delta_rule_ref(q, k, v, g, beta, initial, keep_steps=True)
    out, _, steps = gated_delta_rule_steps(q, k, v, g, beta, initial, steps_out=buffer[:2])
    assert steps.data_ptr() == buffer.data_ptr()
    torch.testing.assert_close(buffer[:2], ref_steps, rtol=1e-5, atol=1e-5)
    assert (buffer[2:] == -5.0).all()
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)


def test_mismatched_shapes_are_refused():
    q, k, v, g, beta, state = _inputs(1, 2, 2, 3, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="do not match"):
        gated_delta_rule_steps(q, k, v, g, beta, state)  # 3 value heads over 2 key heads
