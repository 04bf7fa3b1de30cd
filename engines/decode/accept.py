"""Acceptance rules: greedy longest-prefix match and exact rejection sampling (lossless at T > 0).

Rows: the verify forward sees [anchor, d_1 .. d_{B-1}]; its row j predicts the token after d_j
(row 0 predicts the token after the anchor). So d_{j+1} is checked against the target at row j.
"""

import torch


def greedy_accept(drafts: torch.Tensor, target_logits: torch.Tensor):
    """Longest prefix of drafts equal to the target's argmax, plus the target's next token.

    Args:
        drafts: [B, D] draft tokens; target_logits: [B, D + 1, V].
    Returns:
        num_accepted [B] (0..D) and bonus [B], the target's argmax after the accepted prefix.
    """
    target_tokens = target_logits.argmax(dim=-1)  # [B, D + 1]
    matches = (drafts == target_tokens[:, :-1]).int()
    num_accepted = matches.cumprod(dim=1).sum(dim=1)
    bonus = target_tokens.gather(1, num_accepted[:, None])[:, 0]
    return num_accepted, bonus


def tree_greedy_accept(tokens: torch.Tensor, paths: torch.Tensor, target_logits: torch.Tensor):
    """Greedy acceptance over a tree: the path accepting the most drafts, plus its bonus token.

    Args:
        tokens: [N] node tokens (node 0 = the anchor); paths: [P, D + 1] node ids from the root;
        target_logits: [N, V], row n predicts the token after node n.
    Returns:
        path [1] (ties: the earlier path), num_accepted [1] (0..D) and bonus [1].
    """
    target_tokens = target_logits.argmax(dim=-1)  # [N]
    matches = (tokens[paths[:, 1:]] == target_tokens[paths[:, :-1]]).int()  # [P, D]
    num_accepted = matches.cumprod(dim=1).sum(dim=1)  # [P]
    path = num_accepted.argmax(dim=0, keepdim=True)  # the first of equal maxima
    num_accepted = num_accepted[path]
    bonus = target_tokens[paths[path, num_accepted]]
    return path, num_accepted, bonus


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """The distribution a sampled request draws from: softmax(logits / T), nucleus-truncated to top_p."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < top_p
        keep[..., 0] = True  # the most likely token always stays (a top_p that rounds to 0 in fp32)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def rejection_accept(drafts: torch.Tensor, target_probs: torch.Tensor,
                     draft_probs: torch.Tensor | None, generator: torch.Generator | None = None):
    """Chain speculative sampling: the emitted tokens are distributed exactly as sampling the target.

    Accept d_j with probability min(1, p_j(d_j) / q_j(d_j)); at the first rejection draw from
    normalise(max(p_j - q_j, 0)); if all D are accepted draw the bonus from p_D. ``draft_probs`` None
    means greedy drafts (a point mass q = 1 at d_j): accept with probability p_j(d_j), else draw from p_j
    with d_j removed.

    Args:
        drafts: [B, D]; target_probs: [B, D + 1, V]; draft_probs: [B, D, V] or None.
    Returns:
        num_accepted [B] and the next token [B].
    """
    batch, num_drafts = drafts.shape
    p = target_probs[:, :num_drafts]
    p_draft = p.gather(-1, drafts[..., None])[..., 0]  # [B, D]
    if draft_probs is None:
        q_draft = torch.ones_like(p_draft)
        residual = p.scatter(-1, drafts[..., None], 0.0)
    else:
        q_draft = draft_probs.gather(-1, drafts[..., None])[..., 0]
        residual = (p - draft_probs).clamp_min(0.0)
    u = torch.rand(p_draft.shape, generator=generator, device=p_draft.device)
    accepted = (u * q_draft < p_draft).int()  # u < p/q without dividing by q
    num_accepted = accepted.cumprod(dim=1).sum(dim=1)
    rows = torch.arange(batch, device=drafts.device)
    all_in = num_accepted == num_drafts
    pick = num_accepted.clamp(max=num_drafts - 1) if num_drafts else num_accepted
    resample = residual[rows, pick] if num_drafts else target_probs[:, 0]
    total = resample.sum(-1, keepdim=True)
    resample = torch.where(total > 0, resample / total.clamp_min(1e-30), target_probs[rows, pick])
    final = torch.where(all_in[:, None], target_probs[rows, num_accepted], resample)
    next_token = torch.multinomial(final, 1, generator=generator)[:, 0]
    return num_accepted, next_token
