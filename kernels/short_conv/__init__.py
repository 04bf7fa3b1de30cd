"""The Gated-DeltaNet step's prologue in one kernel: the short convolution (causal depthwise conv
over ``[state | x]``, SiLU, and the state update on commit or the kept window for pending rows) and
the gates (``beta = sigmoid(b)``, ``g = -exp(A_log) * softplus(a + dt_bias)``).

Eagerly that is four kernels per layer and step for the conv (a ``cat`` into the window, the
depthwise conv, the SiLU, the state copy), and two compiled ones for the gates; at decode they are
tiny and each pays a kernel's fixed cost (48 of each per Qwen3.8-27B step:
results/h200-2026-11-30-profile-qwen38-27b-ar-w12.json).

Engine entry point::

    from specpilot.kernels import short_conv
    out, window, beta, g = short_conv.conv_silu_gates(state.conv, mixed, weight, commit,
                                                      window_out, a, b, A_log, dt_bias)
"""

import torch

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.short_conv.reference import conv_silu_gates_ref
from specpilot.kernels.short_conv.reference import gdn_gates_ref
from specpilot.kernels.short_conv.reference import short_conv_silu_ref

__all__ = ["conv_silu_gates", "conv_silu_gates_ref", "gdn_gates_ref", "short_conv_silu_ref"]

MAX_TOKENS = 64  # rows per sequence the kernel takes (decode, verify); more go to the reference


def conv_silu_gates(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    commit: bool, window_out: torch.Tensor | None, a: torch.Tensor,
                    b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor):
    """:func:`conv_silu_gates_ref`'s contract: the Triton kernel on a GPU (or under the
    interpreter) for decode and verify widths (at most ``MAX_TOKENS`` rows: each program walks
    its rows one after another), where it returns None for the window when committing; the
    reference elsewhere (a prefill's thousands of rows)."""
    if (x.is_cuda or interpreting()) and x.shape[1] <= MAX_TOKENS:
        from specpilot.kernels.short_conv.triton import conv_silu_gates_triton

        if x.stride(-1) != 1:
            x = x.contiguous()
        return conv_silu_gates_triton(conv_state, x, weight, commit, window_out, a, b, A_log,
                                      dt_bias)
    return conv_silu_gates_ref(conv_state, x, weight, commit, window_out, a, b, A_log, dt_bias)
