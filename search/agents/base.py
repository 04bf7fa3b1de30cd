"""The proposal-agent base class and the data it works on.

An agent is deterministic for a given context and seed: the same records give the same proposals,
which is what lets a restarted driver regenerate a round and skip the trials it already finished.
"""

import abc
import dataclasses

from specpilot.fingerprint import stable_hash
from specpilot.recipe import Recipe


@dataclasses.dataclass(frozen=True)
class Proposal:
    """One candidate: the champion with ``delta`` applied (or a planted ``fault``)."""

    agent: str
    mechanism: str
    delta: dict
    rationale: str = ""
    fault: str | None = None

    def recipe(self, champion: Recipe) -> Recipe:
        return champion.with_delta(self.delta, name=self.mechanism)

    def key(self, champion: Recipe) -> str:
        """Identity of the trial: the candidate engine it builds (not who proposed it)."""
        return stable_hash({"recipe": self.recipe(champion).hash(), "fault": self.fault})


@dataclasses.dataclass(frozen=True)
class AgentContext:
    setting: str
    features: dict
    champion: Recipe
    gap_table: list[dict]
    """Rows {phase, measured_ms, floor_ms, gap, excess_ms}, largest excess first."""
    tried: frozenset
    """Keys of candidates already evaluated against any champion of this campaign."""
    priors: dict
    """Mechanism name -> prior effect (mean log speedup of similar settings' trials; < 0: hurt)."""
    round: int
    seed: int
    limit: int
    """At most this many proposals from one agent per round."""
    width_bounds: dict = dataclasses.field(default_factory=dict)
    """Verify width -> the cost model's speedup bound for this setting's GPU, concurrency and
    replayed acceptance profile (empty when there is no such profile or no GPU ceilings)."""


class ProposalAgent(abc.ABC):
    """Subclasses set ``name`` and implement ``propose``; proposals already tried are dropped."""

    name = "base"

    def __init__(self, config=None):
        self.config = config

    @abc.abstractmethod
    def propose(self, context: AgentContext) -> list[Proposal]:
        """This round's proposals, best first (at most ``context.limit``, via ``fresh``)."""

    def fresh(self, context: AgentContext, proposals: list[Proposal]) -> list[Proposal]:
        """``proposals`` minus the tried ones, no-ops and duplicates, at most ``context.limit``."""
        out, seen = [], set()
        champion_hash = context.champion.hash()
        for p in proposals:
            key = p.key(context.champion)
            if key in context.tried or key in seen:
                continue
            if p.fault is None and p.recipe(context.champion).hash() == champion_hash:
                continue
            seen.add(key)
            out.append(p)
            if len(out) >= context.limit:
                break
        return out
