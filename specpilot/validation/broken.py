"""Deliberately broken engines: each must fail token forcing (tests/validation prove the gate rejects them).

They subclass the real engine and break exactly one rule, the way a plausible optimisation would.
"""

import torch

from specpilot.engines.cache import GDNState
from specpilot.engines.engine import Engine


class AcceptAllDrafts(Engine):
    """Commits every draft plus the target's last token, whatever the verify said."""

    def _verify_fn(self, cache, draft_cache, verify_ids, positions):
        logits, _, _ = super()._verify_fn(cache, draft_cache, verify_ids, positions)
        num_drafts = verify_ids.shape[1] - 1
        return (logits, torch.full((verify_ids.shape[0],), num_drafts, device=verify_ids.device),
                logits[:, -1].argmax(dim=-1))


class SkipVerify(Engine):
    """Emits the drafter's block without any target verify forward."""

    def _spec_step(self, pending, committed, num_generated, cache, draft_cache, params, generator,
                   replay, graphs=None):
        block_ids, positions = self._block(self._scalar(pending), self._scalar(committed))
        drafts, _ = self._draft_fn(draft_cache, block_ids, positions)
        self._last_width = 0  # nothing verified
        return drafts[0].tolist(), None

    def _commit(self, cache, draft_cache, num_rows, committed, graphs=None):
        pass  # nothing was verified, so there is nothing to commit


class Truncate(Engine):
    """Stops after half the requested tokens (a 'fast' engine that does less work)."""

    def generate(self, prompt_ids, params, forcer=None, replay=None):
        import dataclasses

        short = dataclasses.replace(params, max_new_tokens=max(1, params.max_new_tokens // 2))
        return super().generate(prompt_ids, short, forcer, replay)


class StaleRecurrentState(Engine):
    """Rolls back attention KV but keeps the Gated-DeltaNet state of the whole verified block."""

    def _commit(self, cache, draft_cache, num_rows, committed, graphs=None):
        for layer in cache.layers:
            if isinstance(layer, GDNState) and layer.pending is not None:
                layer.commit(torch.full((layer.conv.shape[0],), layer.pending.conv_window.shape[-1]
                                        - layer.conv.shape[-1], device=self.device))
        super()._commit(cache, draft_cache, num_rows, committed, graphs)


class PromptKeyedCache(Engine):
    """Replays the output it produced the first time it saw a prompt (keyed by prompt tokens)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.memo: dict[tuple[int, ...], list[int]] = {}

    def generate(self, prompt_ids, params, forcer=None, replay=None):
        key = tuple(prompt_ids)
        if key not in self.memo:
            result = super().generate(prompt_ids, params, forcer=None, replay=replay)
            self.memo[key] = list(result.tokens)
            if forcer is None:
                return result
        from specpilot.engines.engine import GenerationResult

        tokens = []
        for token in self.memo[key][:params.max_new_tokens]:
            tokens.extend(forcer.filter(len(tokens), [token]) if forcer is not None else [token])
        return GenerationResult(tokens, [1] * len(tokens), "length")


BROKEN_ENGINES = {
    "accept-all-drafts": AcceptAllDrafts,
    "skip-verify": SkipVerify,
    "truncate": Truncate,
    "stale-recurrent-state": StaleRecurrentState,
    "prompt-keyed-cache": PromptKeyedCache,
}
