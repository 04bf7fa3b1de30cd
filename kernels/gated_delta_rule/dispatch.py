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


# fla-core's decode kernel, as ``fused_recurrent_gated_delta_rule_fwd`` (fla 0.6) launches it
_FLA_RECURRENT_ARGS = {"q", "k", "v", "g", "gk", "gv", "beta", "A_log", "dt_bias", "o", "h0", "ht",
                       "cu_seqlens", "scale", "T", "H", "HV", "K", "V", "BK", "BV"}


@functools.lru_cache(maxsize=None)
def _fla_recurrent_kernel():
    """fla-core's fused recurrent forward kernel, or None when its arguments are not the ones
    :func:`_fused_recurrent_into` passes (another fla-core release: the wrapper then serves)."""
    from fla.ops.gated_delta_rule import fused_recurrent

    kernel = getattr(fused_recurrent, "fused_recurrent_gated_delta_rule_fwd_kernel", None)
    names = set(getattr(getattr(kernel, "fn", kernel), "arg_names", ()))
    return kernel if _FLA_RECURRENT_ARGS <= names else None


def _fused_recurrent_into(q, k, v, g, beta, initial_state, final_state) -> torch.Tensor | None:
    """fla-core's fused recurrent kernel launched as fla's wrapper launches it (its block sizes,
    one warp, three stages: the same bits), storing the final state into ``final_state``, which
    may be ``initial_state`` itself: each program loads its ``[K, BV]`` state slice before its
    token loop and stores it after, and no two programs share a slice. The wrapper allocates a
    new state each call, which the engine then copied into its cache (on Qwen3.8-27B, 48 state
    copies of 1.9 us per decode step). Returns the output, or None (kernel not found)."""
    kernel = _fla_recurrent_kernel()
    if kernel is None:
        return None
    import triton

    batch, num_tokens, heads, key_dim = k.shape
    value_heads, value_dim = v.shape[2], v.shape[3]
    block_v = min(8, triton.next_power_of_2(value_dim))
    out = torch.empty_like(v)
    grid = (triton.cdiv(value_dim, block_v) * batch * value_heads,)
    with torch.cuda.device(q.device):
        kernel[grid](q=q, k=k, v=v, g=g, gk=None, gv=None, beta=beta, A_log=None, dt_bias=None,
                     o=out, h0=initial_state, ht=final_state, cu_seqlens=None,
                     scale=key_dim ** -0.5, T=num_tokens, H=heads, HV=value_heads, K=key_dim,
                     V=value_dim, BK=triton.next_power_of_2(key_dim), BV=block_v,
                     IS_BETA_HEADWISE=beta.ndim != v.ndim, USE_QK_L2NORM_IN_KERNEL=True,
                     APPLY_BETA_SIGMOID=False, ALLOW_NEG_EIGVAL=False, STATE_V_FIRST=False,
                     num_warps=1, num_stages=3)
    return out


def _fla(q, k, v, g, beta, initial_state, keep_steps, steps_out=None, final_out=None):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    q, k, v, beta = (x.contiguous() for x in (q, k, v, beta))
    g = g.float().contiguous()
    num_tokens = q.shape[1]
    if (final_out is not None and not keep_steps and num_tokens <= 64 and final_out.is_contiguous()
            and initial_state.is_contiguous()):
        out = _fused_recurrent_into(q, k, v, g, beta, initial_state, final_out)
        if out is not None:
            return out, final_out, None
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
                     steps_out: torch.Tensor | None = None, steps_kernel: str = "per-token",
                     final_out: torch.Tensor | None = None):
    """Same contract as :func:`gated_delta_rule_ref`; runs fla's Triton kernels on CUDA tensors.
    With ``keep_steps``, ``steps_out`` [B, T, HV, Dk, Dv] (fp32) receives the per-row states and is
    returned as them (a buffer the caller keeps across forwards). ``steps_kernel="fused"`` keeps
    them with this project's one-launch kernel (:mod:`.steps`) instead of fla's kernel once per
    token (on CUDA, or on CPU under the Triton interpreter). ``final_out`` [B, HV, Dk, Dv] (fp32,
    may be ``initial_state``: a committing decode updates its cache in place) receives the final
    state and is returned as it; at decode widths fla's kernel stores it there directly.

    Training (inputs that need a gradient) on CUDA runs the chunked torch form
    (:func:`gated_delta_rule_chunked`): fla-core 0.6 refuses its chunked backward on Hopper with
    Triton < 3.7.1 (wrong results, fla issue #640). On CPU the token reference runs, as it always
    has (the shipped tiny pair was trained through it)."""
    out, state, steps = _run(q, k, v, g, beta, initial_state, keep_steps, steps_out, steps_kernel,
                             final_out)
    if final_out is not None and state is not final_out:
        state = final_out.copy_(state)
    return out, state, steps


def _run(q, k, v, g, beta, initial_state, keep_steps, steps_out, steps_kernel, final_out):
    if _needs_grad(q, k, v, g, beta, initial_state):
        if q.is_cuda and not keep_steps:
            out, state = gated_delta_rule_chunked(q, k, v, g, beta, initial_state)
            return out, state, None
        return gated_delta_rule_ref(q, k, v, g, beta, initial_state, keep_steps)
    if keep_steps and steps_kernel == "fused" and (q.is_cuda or interpreting()):
        from specpilot.kernels.gated_delta_rule.steps import gated_delta_rule_steps

        return gated_delta_rule_steps(q, k, v, g, beta, initial_state, steps_out)
    if q.is_cuda and have_fla():
        return _fla(q, k, v, g, beta, initial_state, keep_steps, steps_out, final_out)
    out, state, steps = gated_delta_rule_ref(q, k, v, g, beta, initial_state, keep_steps)
    if keep_steps and steps_out is not None:
        steps = steps_out.copy_(steps)
    return out, state, steps
