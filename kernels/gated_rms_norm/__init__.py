"""The Gated-DeltaNet output norm, ``weight * norm(x) * silu(gate)``, as one kernel of our own.

Compiled by inductor it is one kernel too, but its reduction config is picked by a timing at the
first call: two H200 runs, with this norm's code the same in both, took 1.8 and 4.7 us per call
for it (48 calls per Qwen3.8-27B decode step: results/h200-2026-11-30-profile-w12-fused-run1.json
and -run2.json). This one has a fixed config.

Engine entry point::

    from specpilot.kernels import gated_rms_norm
    out = gated_rms_norm.gated_rms_norm(x, gate, weight, eps)
"""

import torch

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.gated_rms_norm.reference import gated_rms_norm_ref

__all__ = ["gated_rms_norm", "gated_rms_norm_ref"]


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor,
                   eps: float) -> torch.Tensor:
    """:func:`gated_rms_norm_ref`'s contract: the Triton kernel on a GPU (or under the
    interpreter) for rows [R, D] (inner dim contiguous), the reference elsewhere."""
    if (x.is_cuda or interpreting()) and x.dim() == 2 and x.stride(1) == 1 \
            and gate.stride(-1) == 1:
        from specpilot.kernels.gated_rms_norm.triton import gated_rms_norm_triton

        return gated_rms_norm_triton(x, gate, weight, eps)
    return gated_rms_norm_ref(x, gate, weight, eps)
