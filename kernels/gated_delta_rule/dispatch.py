"""Device dispatch for the gated delta rule: fla-core on CUDA, the torch reference elsewhere."""

import functools

import torch

from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.gated_delta_rule.chunked import gated_delta_rule_chunked
from specpilot.kernels.gated_delta_rule.reference import gated_delta_rule_ref


@functools.lru_cache(maxsize=None)
def have_fla() -> bool:
    """True when flash-linear-attention's gated-delta-rule kernels import (GPU boxes with the wheel)."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: F401
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule  # noqa: F401
    except ImportError:
        return False
    return True


def _fla(q, k, v, g, beta, initial_state, keep_steps, steps_out=None):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
    g = g.float().contiguous()
    num_tokens = q.shape[1]
    if keep_steps:
        # Per-token snapshots: one fused step per token, each returning its state.
        outs, steps, state = [], [], initial_state
        for t in range(num_tokens):
            o, state = fused_recurrent_gated_delta_rule(
                q[:, t:t + 1], k[:, t:t + 1], v[:, t:t + 1], g=g[:, t:t + 1], beta=beta[:, t:t + 1],
                initial_state=state, output_final_state=True, use_qk_l2norm_in_kernel=True)
            outs.append(o)
            steps.append(state)
        if steps_out is None:
            return torch.cat(outs, dim=1), state, torch.stack(steps, dim=1)
        torch.stack(steps, dim=1, out=steps_out)  # one kernel, straight into the kept buffer
        return torch.cat(outs, dim=1), state, steps_out
    # chunk kernel for long prefill; the fused recurrent kernel for decode/verify widths
    fn = chunk_gated_delta_rule if num_tokens > 64 else fused_recurrent_gated_delta_rule
    o, state = fn(q, k, v, g=g, beta=beta, initial_state=initial_state,
                  output_final_state=True, use_qk_l2norm_in_kernel=True)
    return o, state, None


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def gated_delta_rule(q, k, v, g, beta, initial_state, keep_steps: bool = False,
                     steps_out: torch.Tensor | None = None, steps_kernel: str = "per-token"):
    """Same contract as :func:`gated_delta_rule_ref`; runs fla's Triton kernels on CUDA tensors.
    With ``keep_steps``, ``steps_out`` [B, T, HV, Dk, Dv] (fp32) receives the per-row states and is
    returned as them (a buffer the caller keeps across forwards). ``steps_kernel="fused"`` keeps
    them with this project's one-launch kernel (:mod:`.steps`) instead of fla's kernel once per
    token (on CUDA, or on CPU under the Triton interpreter).

    Training (inputs that need a gradient) on CUDA runs the chunked torch form
    (:func:`gated_delta_rule_chunked`): fla-core 0.6 refuses its chunked backward on Hopper with
    Triton < 3.7.1 (wrong results, fla issue #640). On CPU the token reference runs, as it always
    has (the shipped tiny pair was trained through it)."""
    if _needs_grad(q, k, v, g, beta, initial_state):
        if q.is_cuda and not keep_steps:
            out, state = gated_delta_rule_chunked(q, k, v, g, beta, initial_state)
            return out, state, None
        return gated_delta_rule_ref(q, k, v, g, beta, initial_state, keep_steps)
    if keep_steps and steps_kernel == "fused" and (q.is_cuda or interpreting()):
        from specpilot.kernels.gated_delta_rule.steps import gated_delta_rule_steps

        return gated_delta_rule_steps(q, k, v, g, beta, initial_state, steps_out)
    if q.is_cuda and have_fla():
        return _fla(q, k, v, g, beta, initial_state, keep_steps, steps_out)
    out, state, steps = gated_delta_rule_ref(q, k, v, g, beta, initial_state, keep_steps)
    if keep_steps and steps_out is not None:
        steps = steps_out.copy_(steps)
    return out, state, steps
