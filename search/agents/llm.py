"""The LLM agent: asks any OpenAI-compatible endpoint for recipe edits in a fixed JSON schema.

Off by default (a campaign config turns it on with ``agents = [..., "llm"]`` and ``[llm] url``).
The model sees the setting's features, the champion recipe, the gap table and the editable fields
with their allowed values; it must answer with ``{"proposals": [{"delta": {...}, "rationale":
"..."}]}``. Anything else — prose, unknown fields, values the recipe rejects, a changed ``name`` or
``speculative`` — is rejected and recorded; the campaign goes on without it.
"""

import dataclasses
import json
import os
import typing

from specpilot.errors import SpecPilotError
from specpilot.recipe import Recipe
from specpilot.search.agents.base import AgentContext
from specpilot.search.agents.base import Proposal
from specpilot.search.agents.base import ProposalAgent

FROZEN_FIELDS = ("name", "speculative", "sps_table")


def editable_fields() -> dict:
    """Recipe field -> its type as text (what the model may change)."""
    hints = typing.get_type_hints(Recipe)
    return {f.name: str(hints[f.name]).replace("typing.", "") for f in dataclasses.fields(Recipe)
            if f.name not in FROZEN_FIELDS}


def parse_answer(text: str, champion: Recipe) -> tuple[list[dict], list[dict]]:
    """Accepted ``{"delta", "rationale"}`` and rejected ``{"item", "reason"}`` items."""
    try:
        start, end = text.index("{"), text.rindex("}") + 1
        data = json.loads(text[start:end])
    except ValueError as err:
        return [], [{"item": text[:500], "reason": f"not a JSON object: {err}"}]
    items = data.get("proposals") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [], [{"item": str(data)[:500], "reason": "no 'proposals' list"}]
    allowed = editable_fields()
    accepted, rejected = [], []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("delta"), dict):
            rejected.append({"item": str(item)[:500], "reason": "item without a 'delta' object"})
            continue
        extra = sorted(set(item) - {"delta", "rationale"})
        bad = sorted(set(item["delta"]) - set(allowed))
        if extra or bad:
            rejected.append({"item": item, "reason": f"outside the schema: keys {extra + bad}"})
            continue
        try:
            Recipe.from_dict({**champion.to_dict(), **item["delta"]})
        except (SpecPilotError, TypeError, ValueError) as err:
            rejected.append({"item": item, "reason": f"invalid recipe: {err}"})
            continue
        accepted.append({"delta": item["delta"], "rationale": str(item.get("rationale", ""))})
    return accepted, rejected


class LLMAgent(ProposalAgent):
    name = "llm"

    def __init__(self, config=None):
        super().__init__(config)
        self.rejected: list[dict] = []

    def _prompt(self, context: AgentContext) -> str:
        return json.dumps({
            "task": "Propose edits to a lossless speculative-decoding engine recipe that make "
                    "decoding faster on this deployment. Every engine is checked token by token "
                    "against the reference; only speed matters.",
            "setting": context.features, "champion_recipe": context.champion.to_dict(),
            "gap_table": context.gap_table, "editable_fields": editable_fields(),
            "answer_format": {"proposals": [{"delta": {"<field>": "<value>"},
                                             "rationale": "<one sentence>"}]},
            "max_proposals": context.limit}, default=str)

    def propose(self, context: AgentContext) -> list[Proposal]:
        from openai import OpenAI

        llm = self.config.llm
        client = OpenAI(base_url=llm.url, api_key=os.environ.get(llm.api_key_env, "none"),
                        timeout=llm.timeout_s, max_retries=0)
        try:
            reply = client.chat.completions.create(
                model=llm.model, temperature=0, seed=context.seed, max_tokens=512,
                messages=[{"role": "system", "content": "Answer with one JSON object only."},
                          {"role": "user", "content": self._prompt(context)}])
            text = reply.choices[0].message.content or ""
        except Exception as err:  # noqa: BLE001 - an unreachable endpoint loses only this agent
            self.rejected.append({"item": None, "reason": f"endpoint error: {err}"})
            return []
        accepted, rejected = parse_answer(text, context.champion)
        self.rejected.extend(rejected)
        proposals = [Proposal(self.name, "llm:" + ",".join(f"{k}={v}" for k, v in
                                                          sorted(a["delta"].items())),
                              a["delta"], a["rationale"]) for a in accepted[:llm.max_proposals]]
        return self.fresh(context, proposals)
