"""The numeric-mutation agent: moves the champion's numeric knobs one step, seeded.

Knobs: the verify block size, within the drafter's window (fewer rows verify cheaper when the
acceptance tail is thin; in a weight-bound single request extra rows are nearly free). The order
is a ``random.Random`` shuffle seeded by (campaign seed, round), so a round's proposals are
reproducible; then the widths the cost model bounds highest for this GPU, concurrency and replayed
acceptance profile (``AgentContext.width_bounds``) first; then re-sorted by the knowledge store's
priors so that what won in similar settings is tried first.
"""

import random

from specpilot.search.agents.base import AgentContext
from specpilot.search.agents.base import Proposal
from specpilot.search.agents.base import ProposalAgent

MIN_BLOCK = 2


def block_sizes(base: int, window: int) -> list[int]:
    """Neighbours of ``base`` (one and two steps, half, double, the whole window) in range."""
    sizes = {base - 1, base + 1, base - 2, base + 2, base // 2, base * 2, window}
    return sorted(s for s in sizes if MIN_BLOCK <= s <= window and s != base)


class MutationAgent(ProposalAgent):
    name = "mutation"

    def propose(self, context: AgentContext) -> list[Proposal]:
        window = context.features.get("block_size")
        base = context.champion.block_size or window
        if not context.champion.speculative or base is None:
            return []
        rng = random.Random(f"{context.seed}:{context.round}:mutation")
        sizes = block_sizes(base, window)
        if context.width_bounds:  # and the width the cost model bounds highest, wherever it is
            best = max(context.width_bounds, key=context.width_bounds.get)
            sizes += [best] if best != base and best not in sizes else []
        rng.shuffle(sizes)
        # the cost model's best widths for this GPU, concurrency and profile first (stable)
        sizes.sort(key=lambda size: -context.width_bounds.get(size, 0.0))
        proposals = [Proposal(self.name, f"block-size-{size}", {"block_size": size},
                              f"verify {size} rows per step instead of {base}") for size in sizes]
        # What worked in similar settings first (stable: ties keep the seeded order).
        proposals.sort(key=lambda p: -context.priors.get(p.mechanism, 0.0))
        return self.fresh(context, proposals)
