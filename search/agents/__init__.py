"""Proposal agents: each turns the campaign's context (champion, gap table, priors, what was tried)
into recipe edits. ``AGENTS`` maps the names a campaign config uses to their classes."""

from specpilot.search.agents.base import AgentContext
from specpilot.search.agents.base import Proposal
from specpilot.search.agents.base import ProposalAgent
from specpilot.search.agents.catalog import CatalogAgent
from specpilot.search.agents.llm import LLMAgent
from specpilot.search.agents.mutation import MutationAgent

AGENTS = {"catalog": CatalogAgent, "mutation": MutationAgent, "llm": LLMAgent}

__all__ = ["AGENTS", "AgentContext", "CatalogAgent", "LLMAgent", "MutationAgent", "Proposal",
           "ProposalAgent"]
