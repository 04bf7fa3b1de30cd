"""Pure-torch gated delta rule in fp32, token by token (HF ``torch_recurrent_gated_delta_rule`` math)."""

import torch


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def gated_delta_rule_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                         beta: torch.Tensor, initial_state: torch.Tensor,
                         keep_steps: bool = False):
    """Run the recurrence ``S_t = a_t S_{t-1} + k_t beta_t (v_t - a_t S_{t-1}^T k_t)^T``, ``o_t = S_t^T q_t``.

    Args:
        q, k: [B, T, H, K] (l2-normalised here, q also scaled by K^-0.5); v: [B, T, HV, V], HV % H == 0
            (grouped value heads: value head j reads key head j // (HV // H));
        g: [B, T, HV] log decay; beta: [B, T, HV]; initial_state: [B, HV, K, V] fp32.
        keep_steps: also return the state after every token, [B, T, HV, K, V] (snapshot rollback).
    Returns:
        (o [B, T, HV, V] in v's dtype, final_state [B, HV, K, V] fp32, steps or None)
    """
    dtype = v.dtype
    num_k_heads, num_v_heads = k.shape[2], v.shape[2]
    if num_v_heads != num_k_heads:
        q = q.repeat_interleave(num_v_heads // num_k_heads, dim=2)
        k = k.repeat_interleave(num_v_heads // num_k_heads, dim=2)
    q, k, v, g, beta = (x.transpose(1, 2).float() for x in (q, k, v, g, beta))
    q, k = _l2norm(q), _l2norm(k)
    q = q / (q.shape[-1] ** 0.5)
    state = initial_state.float()
    num_tokens = q.shape[2]
    out = torch.empty_like(v)
    steps = []
    for t in range(num_tokens):
        state = state * g[:, :, t].exp()[..., None, None]
        kv_mem = (state * k[:, :, t, :, None]).sum(dim=-2)
        delta = (v[:, :, t] - kv_mem) * beta[:, :, t, None]
        state = state + k[:, :, t, :, None] * delta[:, :, None, :]
        out[:, :, t] = (state * q[:, :, t, :, None]).sum(dim=-2)
        if keep_steps:
            steps.append(state)
    out = out.transpose(1, 2).to(dtype)
    return out, state, (torch.stack(steps, dim=1) if keep_steps else None)
