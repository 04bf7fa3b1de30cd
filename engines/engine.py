"""The engine: one target, an optional block drafter, and a recipe; ``generate`` runs one request.

Per request the engine keeps: ``committed`` tokens whose K/V and recurrent state are in the cache, and
one *pending* token (the last output, not yet fed to the target). A step feeds
``[pending, d_1 .. d_{B-1}]`` (speculative) or ``[pending]`` (AR) to the target, decides which output
tokens to keep, and commits as many input rows as tokens kept: keeping ``[d_1 .. d_a, bonus]`` means
rows ``[pending, d_1 .. d_a]`` are now context and ``bonus`` is the new pending token.

A forcer (token forcing, ``specpilot.validation``) may shorten what a step keeps and replace its last
token; the commit rule above makes that exact, so one divergence never cascades.
"""

import dataclasses
import time

import torch

from specpilot.engines.decode.accept import greedy_accept
from specpilot.engines.decode.accept import rejection_accept
from specpilot.engines.decode.accept import sampling_probs
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.recipe import Recipe


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclasses.dataclass
class GenerationResult:
    tokens: list[int]
    accept_lengths: list[int]  # tokens kept per decode step, bonus included (tau = their mean)
    finish_reason: str  # "stop" | "length"
    decode_s: float = 0.0

    @property
    def tau(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0


class Engine:
    """Builds nothing itself: give it loaded models (see ``specpilot.build``) and a recipe."""

    def __init__(self, target, drafter, recipe: Recipe, max_len: int = 4096):
        self.target, self.recipe, self.max_len = target, recipe, max_len
        self.drafter = drafter if recipe.speculative else None
        if recipe.speculative and drafter is None:
            raise ValueError(f"recipe {recipe.name!r} is speculative but no drafter was given")
        if self.drafter is not None:
            self.drafter.check_target(target)
        self.block_size = (recipe.block_size or drafter.block_size) if self.drafter else 1
        self.device = target.lm_head.weight.device

    @property
    def capture(self) -> tuple[int, ...]:
        return tuple(self.drafter.target_layer_ids) if self.drafter is not None else ()

    def _pick(self, logits: torch.Tensor, params: SamplingParams, generator) -> torch.Tensor:
        if params.temperature <= 0:
            return logits.argmax(dim=-1)
        probs = sampling_probs(logits, params.temperature, params.top_p)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], params: SamplingParams, forcer=None,
                 replay: ReplayPlan | None = None) -> GenerationResult:
        """Generate up to ``params.max_new_tokens`` tokens after ``prompt_ids``."""
        num_prompt = len(prompt_ids)
        capacity = num_prompt + params.max_new_tokens + self.block_size + 1
        if capacity > self.max_len:
            raise ValueError(f"prompt ({num_prompt}) + max_new_tokens ({params.max_new_tokens}) "
                             f"exceeds the engine's context of {self.max_len} tokens")
        generator = None
        if params.temperature > 0:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(params.seed if params.seed is not None else 0)
        stops = set(params.stop_token_ids)
        if not params.ignore_eos and self.target.eos_token_id is not None:
            stops.add(self.target.eos_token_id)
        cache = self.target.new_cache(1, capacity, self.recipe.gdn_rollback)
        draft_cache = self.drafter.new_cache(1, capacity) if self.drafter is not None else None

        ids = torch.tensor([prompt_ids], device=self.device)
        positions = torch.arange(num_prompt, device=self.device)[None]
        out = self.target(ids, positions, cache, commit_all=True, capture=self.capture,
                          last_only=True)
        if draft_cache is not None:
            self.drafter.commit_context(out.aux, positions, draft_cache)
        first = [int(self._pick(out.logits[:, -1], params, generator)[0])]
        kept = forcer.filter(0, first, out.logits[0, -1:]) if forcer is not None else first
        tokens, accept_lengths = list(kept), []
        committed = num_prompt
        start = time.perf_counter()
        while len(tokens) < params.max_new_tokens and tokens[-1] not in stops:
            if self.drafter is None:
                proposed, logits = self._ar_step(tokens[-1], committed, cache, params, generator)
            else:
                proposed, logits = self._spec_step(tokens[-1], committed, len(tokens), cache,
                                                   draft_cache, params, generator, replay)
            proposed = self._clip(proposed, stops, params.max_new_tokens - len(tokens))
            kept = forcer.filter(len(tokens), proposed, logits) if forcer is not None else proposed
            committed += len(kept)
            self._commit(cache, draft_cache, len(kept), committed)
            accept_lengths.append(len(kept))
            tokens.extend(kept)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        finish = "stop" if tokens[-1] in stops else "length"
        return GenerationResult(tokens, accept_lengths, finish, time.perf_counter() - start)

    @staticmethod
    def _clip(proposed: list[int], stops: set[int], budget: int) -> list[int]:
        """Drop what a step proposed past the token budget or after a stop token."""
        proposed = proposed[:budget]
        for i, token in enumerate(proposed):
            if token in stops:
                return proposed[:i + 1]
        return proposed

    def _commit(self, cache, draft_cache, num_rows: int, committed: int) -> None:
        """Keep ``num_rows`` rows of the last forward; ``committed`` tokens are now context."""
        rows = torch.tensor([num_rows], device=self.device)
        new_len = torch.tensor([committed], device=self.device)
        cache.commit(rows, new_len)
        if draft_cache is not None:
            draft_cache.commit(rows, new_len)

    def _ar_step(self, pending, committed, cache, params, generator):
        """One target forward of [pending]; returns ([next token], its logits [1, V])."""
        ids = torch.tensor([[pending]], device=self.device)
        positions = torch.tensor([[committed]], device=self.device)
        out = self.target(ids, positions, cache, commit_all=True)  # AR always keeps its one row
        return [int(self._pick(out.logits[:, 0], params, generator)[0])], out.logits[0]

    def _accept(self, drafts, logits, draft_probs, params, generator):
        """(num_accepted [B], next token [B]) under the request's sampling rule."""
        if params.temperature <= 0:
            return greedy_accept(drafts, logits)
        probs = sampling_probs(logits, params.temperature, params.top_p)
        return rejection_accept(drafts, probs, draft_probs, generator)

    def _spec_step(self, pending, committed, num_generated, cache, draft_cache, params, generator,
                   replay):
        """Draft a block, verify it; returns (kept tokens, the target's logits for them [n, V])."""
        block = self.block_size
        positions = committed + torch.arange(block, device=self.device)[None]
        block_ids = torch.full((1, block), self.drafter.mask_token_id, device=self.device)
        block_ids[0, 0] = pending
        hidden = self.drafter(self.target.embed(block_ids), positions, draft_cache)
        temperature = params.temperature if self.recipe.draft_sampling == "sample" else 0.0
        anchor = block_ids[:, 0]
        drafts, draft_probs = self.drafter.propose(hidden[:, 1:], anchor, self.target.lm_head,
                                                   temperature, generator)
        if replay is not None:
            drafts = replay.override(drafts[0], num_generated)[None]
            draft_probs = None
        verify_ids = torch.cat([block_ids[:, :1], drafts], dim=1)
        out = self.target(verify_ids, positions, cache, commit_all=False, capture=self.capture)
        self.drafter.commit_context(out.aux, positions, draft_cache)
        num_accepted, bonus = self._accept(drafts, out.logits, draft_probs, params, generator)
        a = int(num_accepted[0])
        return drafts[0, :a].tolist() + [int(bonus[0])], out.logits[0, :a + 1]
