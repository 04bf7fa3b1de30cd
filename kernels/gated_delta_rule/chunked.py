"""The gated delta rule in chunks (pure torch, differentiable): what training runs.

Same contract and math as :func:`gated_delta_rule_ref`, but the recurrence advances a whole chunk of
C tokens per step instead of one token, so a sequence of T tokens takes T / C sequential steps and
the [B, H, K, V] state is touched T / C times instead of 5 T times (the token loop is what made the
H200 proxy's target train at 1.5 s per step). Within a chunk, with G_i the cumulative log decay and
S0 the state entering the chunk, the written values U = T (beta V) - T (beta exp(G) K) S0 where
T = (I + A)^-1 and A_ij = beta_i exp(G_i - G_j) k_i.k_j for j < i (one triangular solve); the outputs
are exp(G_i) S0^T q_i + sum_{j <= i} exp(G_i - G_j) (q_i.k_j) u_j and the state leaving the chunk is
exp(G_C) S0 + sum_j exp(G_C - G_j) k_j u_j^T. fla-core's chunked kernels use the same form.
"""

import torch
import torch.nn.functional as F

from specpilot.kernels.gated_delta_rule.reference import _l2norm


def gated_delta_rule_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                             beta: torch.Tensor, initial_state: torch.Tensor,
                             chunk_size: int = 64):
    """``(o [B, T, HV, V] in v's dtype, final_state [B, HV, K, V] fp32)``; shapes as the reference."""
    dtype = v.dtype
    num_k_heads, num_v_heads = k.shape[2], v.shape[2]
    if num_v_heads != num_k_heads:
        q = q.repeat_interleave(num_v_heads // num_k_heads, dim=2)
        k = k.repeat_interleave(num_v_heads // num_k_heads, dim=2)
    q, k, v, g, beta = (x.transpose(1, 2).float() for x in (q, k, v, g, beta))  # [B, H, T, ...]
    q, k = _l2norm(q), _l2norm(k)
    q = q / (q.shape[-1] ** 0.5)
    batch, heads, num_tokens, _ = q.shape
    size = min(chunk_size, num_tokens)
    pad = (-num_tokens) % size  # padded tokens write nothing (beta 0) and do not decay (g 0)
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    chunks = (num_tokens + pad) // size
    q, k, v = (x.reshape(batch, heads, chunks, size, -1) for x in (q, k, v))
    g, beta = (x.reshape(batch, heads, chunks, size) for x in (g, beta))
    cum = g.cumsum(-1)  # G_i
    lower = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    strict = (k @ k.transpose(-1, -2)) * decay * beta[..., :, None]
    eye = torch.eye(size, dtype=q.dtype, device=q.device)
    system = eye + strict.masked_fill(eye.bool() | ~lower, 0.0)
    inverse = torch.linalg.solve_triangular(system, eye.expand_as(system), upper=False)
    written = inverse @ (v * beta[..., None])  # T (beta V)
    state_gain = inverse @ (k * (beta * cum.exp())[..., None])  # T (beta exp(G) K)
    state = initial_state.float()
    outs = []
    for c in range(chunks):
        u = written[:, :, c] - state_gain[:, :, c] @ state  # [B, H, C, V]
        local = (q[:, :, c] @ k[:, :, c].transpose(-1, -2)) * decay[:, :, c]
        outs.append((q[:, :, c] * cum[:, :, c, :, None].exp()) @ state + local @ u)
        last = cum[:, :, c, -1]
        carried = k[:, :, c] * (last[..., None] - cum[:, :, c]).exp()[..., None]
        state = state * last.exp()[..., None, None] + carried.transpose(-1, -2) @ u
    out = torch.stack(outs, dim=2).reshape(batch, heads, chunks * size, -1)[:, :, :num_tokens]
    return out.transpose(1, 2).to(dtype), state
