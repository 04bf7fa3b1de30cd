"""The Gated-DeltaNet prologue kernel equals the eager engine's ops (its reference) under the
Triton interpreter: conv outputs, the committed conv state (in place), the pending window, and the
gates computed alongside."""

import pytest
import torch

from specpilot.kernels.short_conv import conv_silu_gates
from specpilot.kernels.short_conv.reference import conv_silu_gates_ref
from specpilot.kernels.short_conv.reference import short_conv_silu_ref

HEADS = 6


def inputs(seqs: int, tokens: int, channels: int, dtype, seed: int, expanded: bool = False):
    g = torch.Generator().manual_seed(seed)
    state = torch.randn(1 if expanded else seqs, channels, 3, generator=g).to(dtype)
    if expanded:  # a tree's paths all start from the one committed state
        state = state.expand(seqs, -1, -1)
    # the in_proj output: the conv part, then b and a, column slices of one [S, T, *] tensor
    wide = (torch.randn(seqs, tokens, channels + 2 * HEADS + 9, generator=g) * 4).to(dtype)
    weight = (torch.randn(channels, 4, generator=g) * 0.5).to(dtype)
    x = wide[:, :, 2:2 + channels]
    b, a = wide[:, :, 2 + channels:2 + channels + HEADS], wide[:, :, 2 + channels + HEADS:-7]
    a[..., 0], a[..., 1] = 25.0, -18.0  # softplus's identity branch and its exp(x) tail
    a_log = torch.empty(HEADS).uniform_(0.0, 2.8, generator=g).to(dtype)
    dt_bias = torch.randn(HEADS, generator=g).to(dtype)
    return state, x, weight, (a, b, a_log, dt_bias)


def close(a: torch.Tensor, b: torch.Tensor, dtype) -> bool:
    """Same math in the same order. bf16: the conv output and the SiLU each round to bf16, and the
    triton 3.6 interpreter converts fp32 to bf16 by truncation (the GPU rounds to nearest even), so
    two roundings may each differ by one bf16 step (2^-7 relative)."""
    if dtype == torch.float32:
        return torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    return torch.allclose(a.float(), b.float(), rtol=2 ** -6, atol=2 ** -10)


@pytest.mark.parametrize("seqs,tokens,channels", [(1, 1, 37), (2, 2, 130), (1, 6, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_commit_updates_the_state_in_place_and_computes_the_gates(seqs, tokens, channels, dtype):
    state, x, weight, gate_inputs = inputs(seqs, tokens, channels, dtype, seed=tokens)
    ref_state = state.clone()
    ref_out, _, ref_beta, ref_g = conv_silu_gates_ref(ref_state, x, weight, True, None,
                                                      *gate_inputs)
    out, window, beta, g = conv_silu_gates(state, x, weight, True, None, *gate_inputs)
    assert window is None and out.shape == (seqs, tokens, channels) and out.dtype == dtype
    assert close(out, ref_out, dtype)
    assert torch.equal(state, ref_state)  # a pure copy: bit-exact
    assert beta.dtype == dtype and g.dtype == torch.float32
    assert close(beta, ref_beta, dtype)
    assert torch.allclose(g, ref_g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seqs,tokens,expanded", [(2, 5, False), (3, 1, True), (4, 8, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pending_rows_keep_the_window_and_leave_the_state(seqs, tokens, expanded, dtype):
    state, x, weight, gate_inputs = inputs(seqs, tokens, 70, dtype, seed=seqs, expanded=expanded)
    before = state.clone()
    ref_out, ref_window = short_conv_silu_ref(state, x, weight, commit=False)
    buffer = torch.full((seqs, 70, 3 + tokens), float("nan"), dtype=dtype)
    out, window, _, _ = conv_silu_gates(state, x, weight, False, buffer, *gate_inputs)
    assert window is buffer and torch.equal(window, ref_window)
    assert close(out, ref_out, dtype)
    assert torch.equal(state, before)


def test_rejects_a_commit_into_an_expanded_state():
    state, x, weight, gate_inputs = inputs(3, 2, 16, torch.float32, seed=0, expanded=True)
    with pytest.raises(ValueError, match="expanded"):
        conv_silu_gates(state, x, weight, True, None, *gate_inputs)
