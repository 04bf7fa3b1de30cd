"""DSpark drafters (HF ``DSparkDraftModel`` / ``Qwen3DSparkModel``): a DFlash backbone, a sequential
Markov head and a confidence head (REFERENCE-sglang.md §2).

With ``sample_from_anchor`` (default) the draft forward sees gamma rows ``[anchor, MASK x (gamma-1)]``
and row j predicts draft token j+1; the verify window is gamma+1. Base logits come from the target's
lm_head on those rows; the Markov head then walks the block left to right adding a bias that depends
on the previous token (vanilla: ``W2 W1[prev]``; gated: ``W2 (sigmoid(G [h; W1 prev]) * W1 prev)``;
rnn: a tanh recurrence over ``[state; W1 prev; h]``). The confidence head predicts, per position, the
probability that the target accepts it given the prefix: ``sigmoid(proj([h; W1 prev]) / T_s)``; the
verify-budget scheduler (``specpilot.engines.decode.budget``) consumes it. ``last_confidence`` holds
the last proposal's confidences [B, gamma].
"""

import dataclasses

import torch
from torch import nn

from specpilot.engines.models.dflash import DFlashArgs
from specpilot.engines.models.dflash import DFlashDraftModel
from specpilot.engines.models.layers import Linear
from specpilot.errors import CheckpointError

MARKOV_HEADS = ("vanilla", "gated", "rnn")


def _dspark_value(config: dict, name: str, default=None):
    """SGLang's lookup: ``dspark_config`` over ``dflash_config``, then ``dspark_<name>``, then top level."""
    merged = {**(config.get("dflash_config") or {}), **(config.get("dspark_config") or {})}
    for value in (merged.get(name), config.get(f"dspark_{name}"), config.get(name)):
        if value is not None:
            return value
    return default


@dataclasses.dataclass(frozen=True)
class DSparkArgs:
    gamma: int
    markov_rank: int
    markov_head_type: str
    sample_from_anchor: bool
    enable_confidence_head: bool
    confidence_head_with_markov: bool

    @classmethod
    def from_hf(cls, config: dict) -> "DSparkArgs":
        rank = int(_dspark_value(config, "markov_rank", 0))
        if rank <= 0:
            raise CheckpointError("DSpark config needs markov_rank > 0")
        head = _dspark_value(config, "markov_head_type", "vanilla")
        if head not in MARKOV_HEADS:
            raise CheckpointError(f"DSpark markov_head_type must be one of {MARKOV_HEADS}, got {head!r}")
        return cls(
            gamma=int(_dspark_value(config, "block_size", 7)), markov_rank=rank, markov_head_type=head,
            sample_from_anchor=bool(_dspark_value(config, "sample_from_anchor", True)),
            enable_confidence_head=bool(_dspark_value(config, "enable_confidence_head", True)),
            confidence_head_with_markov=bool(_dspark_value(config, "confidence_head_with_markov",
                                                           True)))


class MarkovHead(nn.Module):
    """Prefix-dependent logit bias, applied left to right inside the block."""

    def __init__(self, kind: str, vocab_size: int, hidden_size: int, rank: int):
        super().__init__()
        self.kind = kind
        self.markov_w1 = nn.Embedding(vocab_size, rank)
        self.markov_w2 = Linear(rank, vocab_size, bias=False)
        if kind == "gated":
            self.gate_proj = Linear(hidden_size + rank, rank, bias=True)
        elif kind == "rnn":
            self.joint_proj = Linear(2 * rank + hidden_size, rank, bias=True)

    def bias(self, prev: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor | None):
        """Logit bias [B, V] for the next position; returns (bias, new state)."""
        emb = self.markov_w1(prev)  # [B, r]
        if self.kind == "gated":
            emb = torch.sigmoid(self.gate_proj(torch.cat([hidden, emb], -1))) * emb
        elif self.kind == "rnn":
            state = torch.zeros_like(emb) if state is None else state
            state = torch.tanh(self.joint_proj(torch.cat([state, emb, hidden], -1)))
            emb = state
        return self.markov_w2(emb).float(), state


class ConfidenceHead(nn.Module):
    def __init__(self, hidden_size: int, rank: int, with_markov: bool, gamma: int):
        super().__init__()
        self.with_markov = with_markov
        self.proj = Linear(hidden_size + (rank if with_markov else 0), 1, bias=True)
        self.gamma = gamma
        self.temperature = None  # Sequential Temperature Scaling per position; set by reset_()

    def reset_(self, device) -> None:
        """Uncalibrated temperatures (1) on ``device`` (after meta init; STS calibration not built)."""
        self.temperature = torch.ones(self.gamma, device=device)

    def forward(self, hidden, prev_emb, position: int) -> torch.Tensor:
        x = torch.cat([hidden, prev_emb], -1) if self.with_markov else hidden
        return torch.sigmoid(self.proj(x).float()[:, 0] / self.temperature[position])


class DSparkDraftModel(DFlashDraftModel):
    """DFlash backbone + Markov head + confidence head. ``block_size`` is the verify window gamma+1."""

    def __init__(self, config: dict):
        spark = DSparkArgs.from_hf(config)
        super().__init__(config)
        args: DFlashArgs = self.args
        if args.vocab_size is None:
            raise CheckpointError("DSpark config needs vocab_size (the Markov head is vocab x rank)")
        self.spark = spark
        self.block_size = spark.gamma + 1
        self.markov_head = MarkovHead(spark.markov_head_type, args.vocab_size, args.hidden_size,
                                      spark.markov_rank)
        self.confidence_head = None
        if spark.enable_confidence_head:
            self.confidence_head = ConfidenceHead(args.hidden_size, spark.markov_rank,
                                                  spark.confidence_head_with_markov, spark.gamma)
        self.last_confidence = None
        self._init_buffers()

    def _init_buffers(self) -> None:
        super()._init_buffers()
        head = getattr(self, "confidence_head", None)
        if head is not None and self.fc.weight.device.type != "meta":
            head.reset_(self.fc.weight.device)

    def query_rows(self, block_size: int) -> int:
        return block_size - 1 if self.spark.sample_from_anchor else block_size

    @torch.inference_mode()
    def propose(self, hidden, anchor, lm_head, temperature: float = 0.0, generator=None):
        """Drafts [B, gamma] by the Markov walk; q [B, gamma, V] when sampling; confidences kept."""
        tokens, q, _ = self._walk(hidden, anchor, lm_head, temperature, generator, False)
        return tokens, q

    @torch.inference_mode()
    def draft_logits(self, hidden, anchor, lm_head):
        """The greedy Markov walk [B, gamma] and the logits [B, gamma, V] of each of its steps."""
        tokens, _, logits = self._walk(hidden, anchor, lm_head, 0.0, None, True)
        return tokens, logits

    def _walk(self, hidden, anchor, lm_head, temperature: float, generator, keep_logits: bool):
        """(tokens [B, gamma], q or None, the walk's logits [B, gamma, V] if ``keep_logits``)."""
        if not self.spark.sample_from_anchor:
            hidden = hidden[:, 1:]
        base = self.compute_logits(hidden, lm_head)  # [B, gamma, V]
        prev, state = anchor, None
        tokens, q_rows, conf, rows = [], [], [], []
        for s in range(hidden.shape[1]):
            if self.confidence_head is not None:
                conf.append(self.confidence_head(hidden[:, s], self.markov_head.markov_w1(prev), s))
            bias, state = self.markov_head.bias(prev, hidden[:, s], state)
            logits = base[:, s] + bias
            if keep_logits:
                rows.append(logits)
            if temperature > 0:
                probs = torch.softmax(logits / temperature, dim=-1)
                prev = torch.multinomial(probs, 1, generator=generator)[:, 0]
                q_rows.append(probs)
            else:
                prev = logits.argmax(dim=-1)
            tokens.append(prev)
        self.last_confidence = torch.stack(conf, 1) if conf else None
        q = torch.stack(q_rows, 1) if q_rows else None
        return torch.stack(tokens, 1), q, (torch.stack(rows, 1) if rows else None)

    @torch.no_grad()
    def init_random_(self, generator: torch.Generator, std: float = 0.02) -> None:
        super().init_random_(generator, std)
        if self.confidence_head is not None:
            self.confidence_head.proj.bias.fill_(2.0)  # confident by default (survival ~0.88/pos)


__all__ = ["ConfidenceHead", "DSparkDraftModel", "MarkovHead"]
