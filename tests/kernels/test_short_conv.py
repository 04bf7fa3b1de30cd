"""The Gated-DeltaNet short-conv step kernel equals the eager engine's ops (its reference) under the
Triton interpreter: outputs, the committed conv state (in place) and the pending window."""

import pytest
import torch
from specpilot.kernels.short_conv import short_conv_silu
from specpilot.kernels.short_conv.reference import short_conv_silu_ref


def inputs(seqs: int, tokens: int, channels: int, dtype, seed: int, expanded: bool = False):
    g = torch.Generator().manual_seed(seed)
    state = torch.randn(1 if expanded else seqs, channels, 3, generator=g).to(dtype)
    if expanded:  # a tree's paths all start from the one committed state
        state = state.expand(seqs, -1, -1)
    # the in_proj output's conv part: a column slice of a wider [S, T, *] tensor
    wide = torch.randn(seqs, tokens, channels + 9, generator=g).to(dtype)
    weight = (torch.randn(channels, 4, generator=g) * 0.5).to(dtype)
    return state, wide[:, :, 2:2 + channels], weight


def close(a: torch.Tensor, b: torch.Tensor, dtype) -> bool:
    """Same math in the same order. bf16: the conv output and the SiLU each round to bf16, and the
    triton 3.6 interpreter converts fp32 to bf16 by truncation (the GPU rounds to nearest even), so
    two roundings may each differ by one bf16 step (2^-7 relative)."""
    if dtype == torch.float32:
        return torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    return torch.allclose(a.float(), b.float(), rtol=2 ** -6, atol=2 ** -10)


@pytest.mark.parametrize("seqs,tokens,channels", [(1, 1, 37), (2, 2, 130), (1, 6, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_commit_updates_the_state_in_place(seqs, tokens, channels, dtype):
    state, x, weight = inputs(seqs, tokens, channels, dtype, seed=tokens)
    ref_state = state.clone()
    ref_out, _ = short_conv_silu_ref(ref_state, x, weight, commit=True)
    out, window = short_conv_silu(state, x, weight, commit=True)
    assert window is None and out.shape == (seqs, tokens, channels) and out.dtype == dtype
    assert close(out, ref_out, dtype)
    assert torch.equal(state, ref_state)  # a pure copy: bit-exact


@pytest.mark.parametrize("seqs,tokens,expanded", [(2, 5, False), (3, 1, True), (4, 8, True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pending_rows_keep_the_window_and_leave_the_state(seqs, tokens, expanded, dtype):
    state, x, weight = inputs(seqs, tokens, 70, dtype, seed=seqs, expanded=expanded)
    before = state.clone()
    ref_out, ref_window = short_conv_silu_ref(state, x, weight, commit=False)
    buffer = torch.full((seqs, 70, 3 + tokens), float("nan"), dtype=dtype)
    out, window = short_conv_silu(state, x, weight, commit=False, window_out=buffer)
    assert window is buffer and torch.equal(window, ref_window)
    assert close(out, ref_out, dtype)
    assert torch.equal(state, before)


def test_rejects_a_commit_into_an_expanded_state():
    state, x, weight = inputs(3, 2, 16, torch.float32, seed=0, expanded=True)
    with pytest.raises(ValueError, match="expanded"):
        short_conv_silu(state, x, weight, commit=True)
