"""Stage 1: a small Qwen3.5-architecture hybrid target trained as a causal LM on gsm8k (CPU, seeded).

The forward is the engine's own :meth:`TargetModel.forward` (unwrapped from its inference mode) over
a fresh cache per batch. Gated-DeltaNet layers run with ``commit_all=False`` and ``replay`` rollback,
so the forward only records its rows and never writes the recurrent state in place (which autograd
would reject); the cache is thrown away after the step.
"""

import dataclasses
import inspect
import math
import time

import torch
import torch.nn.functional as F

from specpilot.tiny import EOS_ID
from specpilot.tiny import VOCAB_SIZE

# A Qwen3.5 text config (HF ``qwen3_5_text``): 8 layers, every 4th gated full attention, the rest
# Gated DeltaNet; the shipped tokenizer's vocabulary; about 2.9 M parameters.
TARGET_CONFIG = {
    "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
    "hidden_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 64, "intermediate_size": 384, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "vocab_size": VOCAB_SIZE,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                        "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    "eos_token_id": EOS_ID, "initializer_range": 0.02,
}


@dataclasses.dataclass(frozen=True)
class TargetTraining:
    """The target's training recipe (AdamW, linear warm-up then cosine decay to 10 %)."""

    seed: int = 0
    num_steps: int = 1000
    batch_size: int = 16
    seq_len: int = 128
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    stop_step: int | None = None
    """Stop after this many steps while the learning-rate schedule still spans ``num_steps`` (what a
    time-budgeted run did: its summary's ``steps_done`` reproduces it here)."""


def gsm8k_stream(tokenizer, seed: int) -> torch.Tensor:
    """Every gsm8k training row as ``question \\n answer <|endoftext|>``, shuffled, concatenated: [N]."""
    from specpilot.datasets import load_rows

    rows = load_rows("gsm8k_train")
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    ids = []
    for i in order:
        ids.extend(tokenizer.encode(rows[i]["question"] + "\n" + rows[i]["answer"]).ids)
        ids.append(EOS_ID)
    return torch.tensor(ids)


def lr_factor(step: int, num_steps: int, warmup_steps: int) -> float:
    """Linear warm-up to 1, then cosine decay to 0.1 at ``num_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, num_steps - warmup_steps)
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def stop_before(step: int, recipe, started: float, budget_s: float | None, log, what: str) -> bool:
    """Whether a training loop stops before ``step``: at the recipe's ``stop_step``, or when the
    wall-clock budget is spent (logged: the summary's ``steps_done`` then reproduces the run)."""
    if recipe.stop_step is not None and step >= recipe.stop_step:
        return True
    if budget_s is not None and time.perf_counter() - started > budget_s:
        log(f"{what}: time budget {budget_s:g} s reached after {step} steps")
        return True
    return False


def lm_logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Differentiable logits [B, T, V] of the engine's target forward over ``input_ids`` [B, T]."""
    from specpilot.engines.models.target import TargetModel

    batch, num_tokens = input_ids.shape
    positions = torch.arange(num_tokens, device=input_ids.device).expand(batch, num_tokens)
    cache = model.new_cache(batch, num_tokens, rollback="replay")
    forward = inspect.unwrap(TargetModel.forward)  # the same code, without inference mode
    return forward(model, input_ids, positions, cache, commit_all=False).logits


def train_target(tokenizer, recipe: TargetTraining = TargetTraining(), log=print,
                 config: dict = TARGET_CONFIG, stream: torch.Tensor | None = None,
                 device: str = "cpu", budget_s: float | None = None):
    """Train ``config`` from seeded random weights; returns (model in eval mode, summary dict).

    ``stream``: the token stream to train on (default: gsm8k train, see :func:`gsm8k_stream`);
    ``device``: where to train (fp32 weights; on CUDA matmuls may use TF32); ``budget_s``: stop
    early after this many seconds (the summary records the steps done, which reproduce the run)."""
    from specpilot.engines.models import random_model

    torch.manual_seed(recipe.seed)
    model = random_model(config, device=device, seed=recipe.seed).train()
    for param in model.parameters():
        param.requires_grad_(True)
    if stream is None:
        stream = gsm8k_stream(tokenizer, recipe.seed)
    stream = stream.to(device)
    num_chunks = (len(stream) - 1) // recipe.seq_len
    generator = torch.Generator().manual_seed(recipe.seed + 1)
    order = torch.randperm(num_chunks, generator=generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.95),
                                  weight_decay=recipe.weight_decay)
    start, cursor, recent, losses, steps_done = time.perf_counter(), 0, [], [], 0
    for step in range(recipe.num_steps):
        if stop_before(step, recipe, start, budget_s, log, "target"):
            break
        if cursor + recipe.batch_size > num_chunks:  # next epoch, new order
            order, cursor = torch.randperm(num_chunks, generator=generator), 0
        starts = order[cursor:cursor + recipe.batch_size] * recipe.seq_len
        cursor += recipe.batch_size
        chunk = torch.stack([stream[s:s + recipe.seq_len + 1] for s in starts.tolist()])
        logits = lm_logits(model, chunk[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1))
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * lr_factor(step, recipe.num_steps, recipe.warmup_steps)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        recent.append(loss.detach())
        steps_done = step + 1
        if (step + 1) % 25 == 0 or step + 1 == recipe.num_steps:
            recent = [float(x) for x in recent]
            losses.append((step + 1, sum(recent) / len(recent)))
            log(f"target step {step + 1}/{recipe.num_steps}: loss {losses[-1][1]:.3f} "
                f"({time.perf_counter() - start:.0f} s)")
            recent = []
    if recent:  # the last, partial logging window
        recent = [float(x) for x in recent]
        losses.append((steps_done, sum(recent) / len(recent)))
    model.eval().requires_grad_(False)
    summary = {"recipe": dataclasses.asdict(recipe), "num_tokens_in_corpus": len(stream),
               "steps_done": steps_done,
               "num_tokens_seen": steps_done * recipe.batch_size * recipe.seq_len,
               "loss_by_step": losses, "train_s": round(time.perf_counter() - start, 1)}
    return model, summary
