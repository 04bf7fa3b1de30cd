"""Residual add + RMSNorm in one kernel: ``s = h + delta; (s, norm(s))``.

A pre-norm decoder adds each block's output to the residual stream and norms the sum for the next
block: eagerly an add kernel then a norm kernel, twice per layer (129 adds and 130 norms per
Qwen3.8-27B decode step: results/h200-2026-11-30-profile-qwen38-27b-ar-w12.json). The layers defer
each add to the next norm (:meth:`specpilot.engines.models.layers.RMSNorm.add`), which runs this.

Engine entry point::

    from specpilot.kernels import add_rms_norm
    s, normed = add_rms_norm.add_rms_norm(h, delta, weight, eps, weight_offset=1.0,
                                          round_first=False)
"""

import torch

from specpilot.kernels.add_rms_norm.reference import add_rms_norm_ref
from specpilot.kernels.common.interpret import interpreting

__all__ = ["add_rms_norm", "add_rms_norm_ref"]


def add_rms_norm(h: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float,
                 weight_offset: float, round_first: bool):
    """:func:`add_rms_norm_ref`'s contract: the Triton kernel on a GPU (or under the interpreter),
    the reference elsewhere."""
    if h.is_cuda or interpreting():
        from specpilot.kernels.add_rms_norm.triton import add_rms_norm_triton

        return add_rms_norm_triton(h, delta, weight, eps, weight_offset, round_first)
    return add_rms_norm_ref(h, delta, weight, eps, weight_offset, round_first)
