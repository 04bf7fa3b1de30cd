"""The Gated-DeltaNet short convolution step: causal depthwise conv over ``[state | x]``, SiLU,
and the state update (commit) or the kept window (pending rows), in one kernel.

Eagerly that is four kernels per layer and step (a ``cat`` into the window, the depthwise conv, the
SiLU, the state copy); at decode they are tiny and each pays a kernel's fixed cost (48 of each per
Qwen3.8-27B step: results/h200-2026-11-30-profile-qwen38-27b-ar-w12.json).

Engine entry point::

    from specpilot.kernels import short_conv
    out, window = short_conv.short_conv_silu(state.conv, mixed, weight, commit, window_out)
"""

import torch
from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.short_conv.reference import short_conv_silu_ref

__all__ = ["short_conv_silu", "short_conv_silu_ref"]


def short_conv_silu(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    commit: bool, window_out: torch.Tensor | None = None):
    """:func:`short_conv_silu_ref`'s contract; the Triton kernel on a GPU (or under the
    interpreter), where it returns None for the window when committing; the reference elsewhere."""
    if x.is_cuda or interpreting():
        from specpilot.kernels.short_conv.triton import short_conv_silu_triton

        if x.stride(-1) != 1:
            x = x.contiguous()
        return short_conv_silu_triton(conv_state, x, weight, commit, window_out)
    return short_conv_silu_ref(conv_state, x, weight, commit, window_out)
