"""The mechanism-catalog agent: applicable catalog mechanisms, best expected first.

Ranking: the knowledge store's prior for the mechanism (what it did in similar settings) first,
then how much excess time the gap table shows in the phase the mechanism targets. A mechanism that
hurt or failed validation elsewhere (negative prior) goes last but is still tried if nothing else
is left, since a setting may differ. A delta value ``"cost-model"`` is computed for the
campaign's setting (``search/catalog.py``, ``resolve_delta``); a mechanism the cost model has
nothing for there is not proposed.
"""

from specpilot.search.agents.base import AgentContext
from specpilot.search.agents.base import Proposal
from specpilot.search.agents.base import ProposalAgent
from specpilot.search.catalog import load_catalog
from specpilot.search.catalog import resolve_delta


class CatalogAgent(ProposalAgent):
    name = "catalog"

    def __init__(self, config=None, catalog=None):
        super().__init__(config)
        self.catalog = catalog if catalog is not None else load_catalog()

    def propose(self, context: AgentContext) -> list[Proposal]:
        # time above the calibrated prediction when the table has one, else above the floor
        excess = {row["phase"]: row["measured_ms"] - row.get("predicted_ms", row["floor_ms"])
                  for row in context.gap_table}
        canary = bool(getattr(self.config, "canary", False)) and context.round == 1
        candidates = []
        for m in self.catalog:
            if m.canary:
                if canary:
                    candidates.append((-1e9, m))  # first: the gate is checked before anything
                continue
            if not m.applies_to(context.features):
                continue
            prior = context.priors.get(m.name, 0.0)
            candidates.append((-(prior * 1e3 + excess.get(m.phase, 0.0) * 1e-3), m))
        candidates.sort(key=lambda pair: (pair[0], pair[1].name))
        proposals = []
        for _, m in candidates:
            delta = resolve_delta(m, context.setting)
            if delta is not None:
                proposals.append(Proposal(self.name, m.name, delta, m.term, m.fault))
        limit = context.limit + (1 if canary else 0)
        return self.fresh(context.__class__(**{**context.__dict__, "limit": limit}), proposals)
