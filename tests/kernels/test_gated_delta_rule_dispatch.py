"""The gated delta rule's dispatcher stores the final state into ``final_out`` (the cache's own
state, in place, on a committing decode) and returns it; the values are the reference's."""

import torch

from specpilot.kernels.gated_delta_rule import gated_delta_rule
from specpilot.kernels.gated_delta_rule.reference import gated_delta_rule_ref


def _inputs(tokens, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, tokens, 2, 8, generator=g), torch.randn(2, tokens, 2, 8, generator=g)
    v = torch.randn(2, tokens, 4, 8, generator=g)
    gate = -torch.rand(2, tokens, 4, generator=g)
    beta = torch.rand(2, tokens, 4, generator=g)
    return q, k, v, gate, beta, torch.randn(2, 4, 8, 8, generator=g)


def test_final_state_lands_in_place():
    for tokens in (1, 5):
        q, k, v, gate, beta, h0 = _inputs(tokens, seed=tokens)
        want_out, want_state, _ = gated_delta_rule_ref(q, k, v, gate, beta, h0.clone())
        state = h0.clone()
        out, final, steps = gated_delta_rule(q, k, v, gate, beta, state, final_out=state)
        assert final is state and steps is None
        torch.testing.assert_close(out, want_out, rtol=0, atol=0)
        torch.testing.assert_close(state, want_state, rtol=0, atol=0)


def test_final_state_into_another_buffer_leaves_the_initial_state():
    q, k, v, gate, beta, h0 = _inputs(3)
    initial, into = h0.clone(), torch.zeros_like(h0)
    _, final, _ = gated_delta_rule(q, k, v, gate, beta, initial, final_out=into)
    assert final is into and torch.equal(initial, h0)
    torch.testing.assert_close(into, gated_delta_rule_ref(q, k, v, gate, beta, h0)[1], rtol=0,
                               atol=0)
