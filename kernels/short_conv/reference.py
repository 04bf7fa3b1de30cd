"""Torch reference of the Gated-DeltaNet step's prologue (the eager engine's own ops): the short
convolution and the gates."""

import torch
import torch.nn.functional as F


def short_conv_silu_ref(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                        commit: bool, window_out: torch.Tensor | None = None):
    """Depthwise causal conv over ``[conv_state | x]``, then SiLU.

    Args:
        conv_state: [S, C, K-1], the last K-1 inputs of each sequence (may be an expanded view).
        x: [S, T, C], this forward's inputs (any strides).
        weight: [C, K], the depthwise filter.
        commit: write the window's last K-1 columns into ``conv_state`` (in place).
        window_out: [S, C, K-1+T] buffer for the window, or None for a new tensor.
    Returns:
        (out [S, T, C] in ``weight.dtype``, the window [S, C, K-1+T] in ``conv_state.dtype``).
    """
    parts = [conv_state, x.transpose(1, 2).to(conv_state.dtype)]
    window = (torch.cat(parts, dim=-1) if window_out is None
              else torch.cat(parts, dim=-1, out=window_out))
    conv = F.conv1d(window.to(weight.dtype), weight.unsqueeze(1), groups=weight.shape[0])
    if commit:
        conv_state.copy_(window[:, :, window.shape[-1] - conv_state.shape[-1]:])
    return F.silu(conv).transpose(1, 2), window


def gdn_gates_ref(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """``(beta, g)``: ``beta = sigmoid(b)`` in b's dtype and the log decay ``g = -exp(A_log) *
    softplus(a + dt_bias)`` in fp32, for a, b [S, T, HV]."""
    return b.sigmoid(), -A_log.float().exp() * F.softplus(a.float() + dt_bias)


def conv_silu_gates_ref(conv_state, x, weight, commit, window_out, a, b, A_log, dt_bias):
    """:func:`short_conv_silu_ref` and :func:`gdn_gates_ref`: ``(out, window, beta, g)``."""
    out, window = short_conv_silu_ref(conv_state, x, weight, commit, window_out)
    return (out, window, *gdn_gates_ref(a, b, A_log, dt_bias))
