"""Triton gated delta rule that keeps the state after every token (snapshot rollback's verify).

fla-core's fused recurrent kernel returns only the final state, so the snapshot path used to run
it once per token and stack the T states: every state read and written twice more than needed
(T launches, T temporaries, one stack copy). This kernel runs the whole window in one launch and
stores each token's state straight into the caller's buffer: one read of the initial state and T
writes, the traffic the cost model's verify floor counts.

One program holds a ``[K, BLOCK_V]`` slice of one (sequence, value head)'s fp32 state in registers
and steps through the tokens, the math of :func:`gated_delta_rule_ref` (q and k l2-normalised in
the kernel, q scaled by K^-0.5; value head j reads key head j // (HV // H))::

    S = S * exp(g_t);  S += k_t (beta_t (v_t - S^T k_t))^T;  o_t = S^T q_t

All arithmetic is fp32 (inputs are upcast on load), so the interpreter runs it on CPU.
"""

import torch
import triton
import triton.language as tl

from specpilot.kernels.common.interpret import ensure_interpreter_compat
from specpilot.kernels.common.launch import cdiv
from specpilot.kernels.common.launch import next_pow2

ensure_interpreter_compat()  # the token loop's runtime bound, under the CPU interpreter

BLOCK_V = 32  # a [128, 32] fp32 state slice: 32 registers a thread at 4 warps
NUM_WARPS = 4
L2_EPS = 1e-6


@triton.jit
def _steps_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, h0_ptr, o_ptr, steps_ptr,
                  T, HK, HV, K, V, scale,
                  s_qb, s_qt, s_qh, s_kb, s_kt, s_kh, s_vb, s_vt, s_vh, s_gb, s_gt, s_h0b, s_h0h,
                  s_ob, s_ot, s_oh, s_sb, s_st, s_sh,
                  BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, EPS: tl.constexpr):
    pid = tl.program_id(0)
    b = (pid // HV).to(tl.int64)
    hv = pid % HV
    hk = hv // (HV // HK)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    k_mask, v_mask = offs_k < K, offs_v < V
    hv_mask = k_mask[:, None] & v_mask[None, :]
    tile = offs_k[:, None] * V + offs_v[None, :]  # a state's [K, V] is contiguous
    h = tl.load(h0_ptr + b * s_h0b + hv * s_h0h + tile, mask=hv_mask, other=0.0).to(tl.float32)
    # per-token pointers advance by their stride each step (64-bit pointer arithmetic: t x the
    # steps' row stride would pass 2**31 in int32 for long windows)
    q_at, k_at = q_ptr + b * s_qb + hk * s_qh, k_ptr + b * s_kb + hk * s_kh
    v_at, o_at = v_ptr + b * s_vb + hv * s_vh, o_ptr + b * s_ob + hv * s_oh
    g_at, beta_at = g_ptr + b * s_gb + hv, beta_ptr + b * s_gb + hv
    steps_at = steps_ptr + b * s_sb + hv * s_sh
    for _ in range(T):
        q = tl.load(q_at + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        k = tl.load(k_at + offs_k, mask=k_mask, other=0.0).to(tl.float32)
        v = tl.load(v_at + offs_v, mask=v_mask, other=0.0).to(tl.float32)
        g = tl.load(g_at).to(tl.float32)
        beta = tl.load(beta_at).to(tl.float32)
        q = q / tl.sqrt(tl.sum(q * q) + EPS) * scale
        k = k / tl.sqrt(tl.sum(k * k) + EPS)
        h = h * tl.exp(g)
        delta = (v - tl.sum(h * k[:, None], axis=0)) * beta  # [BLOCK_V]
        h = h + k[:, None] * delta[None, :]
        o = tl.sum(h * q[:, None], axis=0)
        tl.store(o_at + offs_v, o.to(o_ptr.dtype.element_ty), mask=v_mask)
        tl.store(steps_at + tile, h, mask=hv_mask)
        q_at, k_at, v_at, o_at = q_at + s_qt, k_at + s_kt, v_at + s_vt, o_at + s_ot
        g_at, beta_at, steps_at = g_at + s_gt, beta_at + s_gt, steps_at + s_st


def gated_delta_rule_steps(q, k, v, g, beta, initial_state, steps_out=None,
                           block_v: int = BLOCK_V, num_warps: int = NUM_WARPS):
    """:func:`gated_delta_rule_ref` with ``keep_steps=True`` in one launch.

    q, k [B, T, H, K]; v [B, T, HV, V]; g, beta [B, T, HV]; initial_state [B, HV, K, V] fp32;
    ``steps_out`` [B, T, HV, K, V] fp32 (allocated when None). Returns (o [B, T, HV, V] in v's
    dtype, the final state = ``steps[:, -1]`` (a view), steps).
    """
    batch, num_tokens, num_k_heads, dk = q.shape
    num_v_heads, dv = v.shape[2], v.shape[3]
    if (num_v_heads % num_k_heads or k.shape != q.shape or v.shape[:2] != q.shape[:2]
            or g.shape != (batch, num_tokens, num_v_heads) or beta.shape != g.shape
            or initial_state.shape != (batch, num_v_heads, dk, dv)):
        raise ValueError(f"gated_delta_rule_steps: q {tuple(q.shape)}, k {tuple(k.shape)}, "
                         f"v {tuple(v.shape)}, state {tuple(initial_state.shape)} do not match")
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    g, beta = g.contiguous(), beta.contiguous()
    h0 = initial_state if initial_state[0, 0].is_contiguous() else initial_state.contiguous()
    steps = steps_out
    if steps is None:
        steps = torch.empty(batch, num_tokens, num_v_heads, dk, dv, dtype=torch.float32,
                            device=q.device)
    elif not steps[0, 0, 0].is_contiguous() or steps.shape != (batch, num_tokens, num_v_heads,
                                                               dk, dv):
        raise ValueError(f"gated_delta_rule_steps: steps_out {tuple(steps.shape)} is not a "
                         f"[B, T, HV, K, V] buffer with contiguous [K, V] states")
    out = torch.empty(batch, num_tokens, num_v_heads, dv, dtype=v.dtype, device=v.device)
    grid = (batch * num_v_heads, cdiv(dv, block_v))
    _steps_kernel[grid](q, k, v, g, beta, h0, out, steps, num_tokens, num_k_heads, num_v_heads,
                        dk, dv, dk ** -0.5,
                        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1),
                        k.stride(2), v.stride(0), v.stride(1),
                        v.stride(2), g.stride(0), g.stride(1), h0.stride(0), h0.stride(1),
                        out.stride(0), out.stride(1), out.stride(2),
                        steps.stride(0), steps.stride(1), steps.stride(2),
                        BLOCK_K=next_pow2(dk), BLOCK_V=block_v, EPS=L2_EPS, num_warps=num_warps)
    return out, steps[:, -1], steps
