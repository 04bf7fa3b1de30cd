"""Gated delta rule (the Gated DeltaNet recurrence): torch reference on CPU, fla-core's kernels on GPU.

``gated_delta_rule`` dispatches by device: CUDA tensors go to flash-linear-attention (the kept library,
carried as a wheel to GPU boxes); anything else, or a GPU box without fla, uses the fp32 torch reference.
"""

from specpilot.kernels.gated_delta_rule.dispatch import gated_delta_rule
from specpilot.kernels.gated_delta_rule.dispatch import have_fla
from specpilot.kernels.gated_delta_rule.reference import gated_delta_rule_ref

__all__ = ["gated_delta_rule", "gated_delta_rule_ref", "have_fla"]
