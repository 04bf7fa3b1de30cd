"""Continuous batching: many requests in one cache, one draft forward and one verify forward per step.

Running requests occupy rows ``0 .. n-1`` of a fixed-size cache (a finished request's row is refilled
by moving the last running row into it), so every step runs on contiguous row views with batch = n.
Requests join between steps (prefill into their row) and leave between steps. Each row has its own
positions and its own sampling rule; batching changes no request's tokens: rows never attend to,
or mix state with, other rows.
"""

import dataclasses

import torch

from specpilot.engines.decode.accept import rejection_accept
from specpilot.engines.decode.accept import sampling_probs
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models.layers import set_fused_elementwise
from specpilot.engines.models.layers import set_gemm


@dataclasses.dataclass
class Running:
    """One request in the batch."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stops: set[int]
    tokens: list[int] = dataclasses.field(default_factory=list)
    accept_lengths: list[int] = dataclasses.field(default_factory=list)
    committed: int = 0
    generator: torch.Generator | None = None
    finish_reason: str | None = None
    replay: ReplayPlan | None = None  # benchmark-only simulated acceptance (see ReplayPlan)


class BatchEngine:
    """Steps all running requests together; ``max_batch`` rows of ``max_len`` tokens each."""

    def __init__(self, engine: Engine, max_batch: int):
        recipe = engine.recipe
        if recipe.verify_budget != "static" or recipe.draft_sampling != "greedy":
            raise ValueError(f"recipe {recipe.name!r}: batched decoding runs verify_budget='static' "
                             "with greedy drafts only (budgeted verify and sampled drafts are "
                             "single-request for now)")
        self.engine, self.max_batch = engine, max_batch
        self.cache = engine.target.new_cache(max_batch, engine.max_len, engine.recipe.gdn_rollback)
        self.draft_cache = (engine.drafter.new_cache(max_batch, engine.max_len)
                            if engine.drafter is not None else None)
        self.running: list[Running] = []

    @property
    def free_rows(self) -> int:
        return self.max_batch - len(self.running)

    def _rows(self, n: int):
        cache = self.cache.rows(slice(0, n))
        draft = self.draft_cache.rows(slice(0, n)) if self.draft_cache is not None else None
        return cache, draft

    def _apply_recipe(self) -> None:
        e = self.engine
        for model in (e.target, e.drafter):
            if model is not None:
                set_fused_elementwise(model, e.fused)
                set_gemm(model, e.recipe.gemm)

    @torch.inference_mode()
    def add(self, req: Running) -> None:
        """Prefill ``req`` into the next free row; its first token is produced here."""
        e, row = self.engine, len(self.running)
        if row >= self.max_batch:
            raise RuntimeError("no free row")
        capacity = len(req.prompt_ids) + req.params.max_new_tokens + e.block_size + 1
        if capacity > e.max_len:
            raise ValueError(f"prompt ({len(req.prompt_ids)}) + max_new_tokens "
                             f"({req.params.max_new_tokens}) exceeds the context of {e.max_len}")
        self._apply_recipe()
        cache, draft = self.cache.rows(slice(row, row + 1)), None
        cache.reset()
        if self.draft_cache is not None:
            draft = self.draft_cache.rows(slice(row, row + 1))
            draft.reset()
        if req.params.temperature > 0:
            req.generator = torch.Generator(device=e.device)
            req.generator.manual_seed(req.params.seed if req.params.seed is not None else 0)
        ids = torch.tensor([req.prompt_ids], device=e.device)
        positions = torch.arange(len(req.prompt_ids), device=e.device)[None]
        out = e.target.prefill(ids, positions, cache, capture=e.capture)
        if draft is not None:
            e.drafter.commit_context(out.aux, positions, draft)
        req.tokens = [int(e._pick(out.logits[:, -1], req.params, req.generator)[0])]
        req.committed = len(req.prompt_ids)
        self.running.append(req)
        self._maybe_finish(req)

    def _maybe_finish(self, req: Running) -> None:
        if req.tokens and req.tokens[-1] in req.stops:
            req.finish_reason = "stop"
        elif len(req.tokens) >= req.params.max_new_tokens:
            req.finish_reason = "length"

    def remove(self, req: Running) -> None:
        """Drop ``req``; the last running row moves into its row."""
        row, last = self.running.index(req), len(self.running) - 1
        if row != last:
            self.cache.copy_row(last, row)
            if self.draft_cache is not None:
                self.draft_cache.copy_row(last, row)
            self.running[row] = self.running[last]
        self.running.pop()

    @torch.inference_mode()
    def step(self) -> list[tuple[Running, list[int]]]:
        """One decode step for every running request; returns (request, new tokens) pairs."""
        if not self.running:
            return []
        self._apply_recipe()
        e, n = self.engine, len(self.running)
        cache, draft = self._rows(n)
        pending = torch.tensor([r.tokens[-1] for r in self.running], device=e.device)
        start = torch.tensor([r.committed for r in self.running], device=e.device)
        if e.drafter is None:
            logits = e._decode_fn(cache, pending[:, None], start[:, None])
            proposals = [[int(e._pick(logits[i:i + 1], r.params, r.generator)[0])]
                         for i, r in enumerate(self.running)]
        else:
            proposals = self._spec(cache, draft, pending, start)
        out = []
        num_rows = []
        for r, proposed in zip(self.running, proposals):
            if r.finish_reason is not None:
                num_rows.append(1)  # a finished row waiting for removal: any row count is fine
                continue
            kept = Engine._clip(proposed, r.stops, r.params.max_new_tokens - len(r.tokens))
            r.tokens.extend(kept)
            r.accept_lengths.append(len(kept))
            r.committed += len(kept)
            num_rows.append(len(kept))
            self._maybe_finish(r)
            out.append((r, kept))
        if e.drafter is not None:
            rows = torch.tensor(num_rows, device=e.device)
            e._commit_fn(cache, draft, rows, torch.tensor([r.committed for r in self.running],
                                                          device=e.device))
        return out

    def _spec(self, cache, draft, pending, start) -> list[list[int]]:
        e = self.engine
        block = e.block_size
        block_ids, positions = e._block(pending, start)
        drafts, _ = e._draft_fn(draft, block_ids, positions)
        replayed = [(i, r) for i, r in enumerate(self.running) if r.replay is not None]
        for i, r in replayed:
            drafts[i] = torch.tensor(r.replay.override(len(r.tokens), block - 1), device=e.device)
        verify_ids = torch.cat([block_ids[:, :1], drafts], dim=1)
        logits, num_accepted, bonus = e._verify_fn(cache, draft, verify_ids, positions)
        for i, r in replayed:
            num_accepted[i], bonus[i] = e._replayed(r.replay, int(num_accepted[i]), logits[i], block)
        sampled = [i for i, r in enumerate(self.running) if r.params.temperature > 0]
        for i in sampled:  # per-row rejection sampling with the row's own rule and generator
            r = self.running[i]
            probs = sampling_probs(logits[i:i + 1], r.params.temperature, r.params.top_p)
            a, b = rejection_accept(drafts[i:i + 1], probs, None, r.generator)
            num_accepted[i], bonus[i] = a[0], b[0]
        table = torch.cat([num_accepted[:, None], bonus[:, None], drafts], dim=1).tolist()
        return [row[2:2 + row[0]] + [row[1]] for row in table]
