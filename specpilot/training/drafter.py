"""Stage 2: a DFlash2 drafter trained with the block-diffusion objective on the target's own outputs.

One training row is one verify window of the engine: an anchor position ``p`` of a greedy
continuation, the block ``[x_p, MASK x (B-1)]`` at positions ``p .. p+B-1``, context = the target's
features of tokens ``0 .. p-1`` (KV injection), labels = the target's greedy tokens
``x_{p+1} .. x_{p+B-1}``. All ``B-1`` positions are predicted in one forward (cross-entropy per
position, early positions weighted more: ``w_k = exp(-(k-1) / position_decay)``, since a draft
token only counts when every earlier one was accepted). The candidate selector is trained on the
same rows, teacher-forced: its score over the top-k candidates must pick the label after the
label's true predecessor (the anchor for the first position).

Every forward is the engine's own code: :meth:`DFlashDraftModel.commit_context` writes one context
cache per sequence, its rows are gathered per anchor, and :meth:`DFlashDraftModel.forward` runs the
block (both unwrapped from their inference mode). The cache is the unwindowed layout of
``new_cache`` (every row kept, same per-layer window masks), so many anchors share one context.
"""

import dataclasses
import inspect
import time

import torch
import torch.nn.functional as F

from specpilot.tiny import DRAFTERS
from specpilot.training.target import lr_factor
from specpilot.training.target import stop_before

# tiny.py's DFlash2 drafter (block 8, 2 sliding-window non-causal layers, grouped convs, selector,
# reading target layers [1, 3, 5]) at the trained target's width.
DRAFTER_CONFIG = {**DRAFTERS["tiny-dflash2"], "hidden_size": 128, "intermediate_size": 384,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}


@dataclasses.dataclass(frozen=True)
class DrafterTraining:
    """The drafter's training recipe (AdamW, linear warm-up then cosine decay to 10 %)."""

    seed: int = 0
    num_steps: int = 1200
    sequences_per_step: int = 8
    anchors_per_sequence: int = 32
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    stop_step: int | None = None
    """Stop after this many steps while the learning-rate schedule still spans ``num_steps`` (what a
    time-budgeted run did: its summary's ``steps_done`` reproduces it here)."""
    position_decay: float = 4.0
    selector_weight: float = 1.0


def _context_cache(drafter, num_rows: int, capacity: int):
    """``drafter.new_cache`` without the ring: every context row kept, same per-layer windows."""
    from specpilot.engines.cache import KVCache
    from specpilot.engines.cache import ModelCache

    weight = drafter.fc.weight
    return ModelCache([KVCache(num_rows, capacity, layer.self_attn.num_kv_heads,
                               layer.self_attn.head_dim, weight.dtype, weight.device,
                               window=layer.self_attn.window) for layer in drafter.layers])


def block_rows(sequences, anchors: list[list[int]], block_size: int, mask_token_id: int):
    """(row -> sequence index [R], block ids [R, B], positions [R, B], labels [R, B-1])."""
    seq_index, blocks, positions, labels = [], [], [], []
    offsets = torch.arange(block_size, device=sequences[0].token_ids.device)
    for s, (seq, seq_anchors) in enumerate(zip(sequences, anchors)):
        for p in seq_anchors:
            seq_index.append(s)
            window = seq.token_ids[p:p + block_size]
            blocks.append(torch.cat([window[:1], torch.full((block_size - 1,), mask_token_id,
                                                            device=window.device)]))
            positions.append(p + offsets)
            labels.append(window[1:])
    return (torch.tensor(seq_index, device=offsets.device), torch.stack(blocks),
            torch.stack(positions), torch.stack(labels))


def block_diffusion_loss(drafter, target, sequences, anchors, recipe: DrafterTraining):
    """Weighted loss over the rows of ``sequences`` at ``anchors``; also per-position accuracies."""
    from specpilot.engines.models.dflash import DFlashDraftModel

    block = drafter.block_size
    seq_index, block_ids, positions, labels = block_rows(sequences, anchors, block,
                                                         drafter.mask_token_id)
    capacity = max(len(seq.features) for seq in sequences)
    device = block_ids.device
    features = torch.zeros(len(sequences), capacity, sequences[0].features.shape[-1],
                           device=device)
    for s, seq in enumerate(sequences):  # padding rows sit after every anchor: never visible
        features[s, :len(seq.features)] = seq.features.float()
    context = _context_cache(drafter, len(sequences), capacity)
    commit = inspect.unwrap(DFlashDraftModel.commit_context)
    commit(drafter, features, torch.arange(capacity, device=device).expand(len(sequences), -1),
           context)
    forward = inspect.unwrap(DFlashDraftModel.forward)
    hidden = forward(drafter, target.draft_embed(block_ids), positions,
                     context.rows(seq_index))[:, 1:]  # row 0 (the anchor) is not decoded
    logits = drafter.compute_logits(hidden, target.lm_head)  # [R, B-1, V]
    weights = torch.exp(-torch.arange(block - 1, device=device) / recipe.position_decay)
    weights = weights / weights.sum()
    token_ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
    loss = (token_ce.view_as(labels) * weights).sum(-1).mean()
    stats = {"acc": (logits.argmax(-1) == labels).float().mean(0)}
    selector = getattr(drafter, "candidate_selector", None)
    if selector is not None:
        unary, candidates = torch.topk(logits, selector.top_k, dim=-1)  # [R, B-1, k]
        predecessors = torch.cat([block_ids[:, :1], labels[:, :-1]], dim=1)
        query = selector.predecessor_codebook(predecessors) * selector.hidden_projection(hidden)
        scores = unary + torch.einsum("rtd,rtkd->rtk", query,
                                      selector.successor_codebook(candidates)).float()
        hits = candidates == labels[..., None]
        found = hits.any(-1)  # the label is among the top-k (else the selector cannot pick it)
        select_ce = F.cross_entropy(scores.flatten(0, 1), hits.float().argmax(-1).flatten(),
                                    reduction="none").view_as(labels) * found
        loss = loss + recipe.selector_weight * (select_ce * weights).sum(-1).mean()
        picked = candidates.gather(-1, scores.argmax(-1, keepdim=True))[..., 0]
        stats["selector_acc"] = (picked == labels).float().mean(0)
    return loss, stats


def _sample_anchors(sequences, count: int, block_size: int, generator) -> list[list[int]]:
    """Up to ``count`` distinct anchors per sequence, inside its continuation, with B-1 labels after."""
    anchors = []
    for seq in sequences:
        low, high = seq.num_prompt_tokens, len(seq.token_ids) - block_size  # inclusive range
        choices = torch.randperm(high - low + 1, generator=generator)[:count] + low
        anchors.append(sorted(choices.tolist()))
    return anchors


def train_drafter(target, continuations, recipe: DrafterTraining = DrafterTraining(), log=print,
                  config: dict = DRAFTER_CONFIG, budget_s: float | None = None):
    """Train ``config`` against a frozen ``target`` (on the target's device); returns (drafter in
    eval mode, summary). ``budget_s``: stop early after this many seconds (steps done recorded)."""
    from specpilot.engines.models import random_model

    torch.manual_seed(recipe.seed)
    target.requires_grad_(False)
    device = target.lm_head.weight.device
    drafter = random_model(config, device=device, seed=recipe.seed + 1).train()
    drafter.requires_grad_(True)
    drafter.check_target(target)
    short = [i for i, c in enumerate(continuations)
             if len(c.token_ids) - c.num_prompt_tokens < drafter.block_size]
    if short:
        raise ValueError(f"continuations {short[:5]} have fewer than block_size "
                         f"({drafter.block_size}) generated tokens: no anchor has a full block")
    generator = torch.Generator().manual_seed(recipe.seed + 2)
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=recipe.lr, betas=(0.9, 0.95),
                                  weight_decay=recipe.weight_decay)
    order, cursor = torch.randperm(len(continuations), generator=generator), 0
    start, recent, history, steps_done = time.perf_counter(), [], [], 0
    for step in range(recipe.num_steps):
        if stop_before(step, recipe, start, budget_s, log, "drafter"):
            break
        if cursor + recipe.sequences_per_step > len(order):
            order, cursor = torch.randperm(len(continuations), generator=generator), 0
        batch = [continuations[i] for i in order[cursor:cursor + recipe.sequences_per_step]]
        cursor += recipe.sequences_per_step
        anchors = _sample_anchors(batch, recipe.anchors_per_sequence, drafter.block_size,
                                  generator)
        loss, stats = block_diffusion_loss(drafter, target, batch, anchors, recipe)
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * lr_factor(step, recipe.num_steps, recipe.warmup_steps)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), recipe.grad_clip)
        optimizer.step()
        recent.append((loss.detach(), stats["selector_acc" if "selector_acc" in stats else "acc"]))
        steps_done = step + 1
        if (step + 1) % 50 == 0 or step + 1 == recipe.num_steps:
            recent = [(float(r[0]), r[1]) for r in recent]
            mean_loss = sum(r[0] for r in recent) / len(recent)
            acc = torch.stack([r[1] for r in recent]).mean(0)
            history.append({"step": step + 1, "loss": round(mean_loss, 4),
                            "accuracy_by_position": [round(float(a), 3) for a in acc]})
            log(f"drafter step {step + 1}/{recipe.num_steps}: loss {mean_loss:.3f}, accuracy by "
                f"position {' '.join(f'{float(a):.2f}' for a in acc)} "
                f"({time.perf_counter() - start:.0f} s)")
            recent = []
    drafter.eval().requires_grad_(False)
    summary = {"recipe": dataclasses.asdict(recipe), "num_sequences": len(continuations),
               "steps_done": steps_done,
               "history": history, "train_s": round(time.perf_counter() - start, 1)}
    return drafter, summary
