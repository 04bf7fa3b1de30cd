"""Campaign configuration: a frozen dataclass read from TOML (or JSON); unknown keys are errors.

Every knob that changes what a campaign measures lives here, so the config hash names a campaign
and a restarted driver with the same config resumes it instead of starting over.
"""

import dataclasses
import json
import tomllib
from pathlib import Path

from specpilot.errors import SpecPilotError
from specpilot.fingerprint import stable_hash

AGENTS = ("catalog", "mutation", "llm")


@dataclasses.dataclass(frozen=True)
class LLMAgentConfig:
    """An OpenAI-compatible endpoint that proposes recipe edits (off unless ``url`` is set)."""

    url: str | None = None
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    max_proposals: int = 2


@dataclasses.dataclass(frozen=True)
class CampaignConfig:
    setting: str
    rounds: int = 2
    time_budget_s: float = 3600.0
    seed: int = 0
    agents: tuple[str, ...] = ("catalog", "mutation")
    proposals_per_agent: int = 2
    canary: bool = True
    """Plant a known-bad mechanism (accepts every draft) in round 1: the gate must reject it."""
    num_workers: int = 1
    trial_timeout_s: float = 900.0
    max_attempts: int = 2
    """A trial whose worker died is re-run on another worker up to this many attempts in all."""
    # token forcing of every candidate (defaults: the setting's [validation])
    validation_prompts: int | None = None
    validation_tokens: int | None = None
    # A/B bench of every candidate against the champion
    bench_prompts: int | None = None
    bench_tokens: int | None = None
    compare_half_width: float = 0.02
    compare_budget_s: float = 120.0
    compare_max_rounds: int = 20
    min_effect: float = 0.01
    """A candidate wins when its CI's lower bound exceeds 1 + min_effect."""
    min_pairs: int = 4
    """...and its A/B has at least this many pairs (a CI of one or two pairs decides nothing)."""
    bound_fraction: float = 0.95
    """Stop when every measured phase is within 1 / bound_fraction of its floor."""
    # kernel sub-agent
    kernel_trials: int = 4
    kernel_reps: int = 20
    # records
    campaign_dir: str | None = None
    tracking_uri: str | None = None
    ray_address: str | None = None
    knowledge_dir: str | None = None
    priors: bool = True
    """Read the knowledge store's rows of similar settings as priors for the catalog agent."""
    start_recipe: dict | None = None
    """Start from this recipe (a delta on stock) instead of the setting's champion or stock."""
    llm: LLMAgentConfig = LLMAgentConfig()

    def __post_init__(self):
        object.__setattr__(self, "agents", tuple(self.agents))
        unknown = sorted(set(self.agents) - set(AGENTS))
        if unknown:
            raise SpecPilotError(f"campaign config: unknown agent(s) {unknown}; known: {AGENTS}")
        if "llm" in self.agents and not self.llm.url:
            raise SpecPilotError("campaign config: the llm agent needs [llm] url")
        positive = ("rounds", "proposals_per_agent", "num_workers", "max_attempts", "min_pairs",
                    "compare_max_rounds", "kernel_reps")
        for name in positive:
            if getattr(self, name) < 1:
                raise SpecPilotError(f"campaign config: {name} must be >= 1")
        for name in ("time_budget_s", "trial_timeout_s", "compare_budget_s"):
            if getattr(self, name) <= 0:
                raise SpecPilotError(f"campaign config: {name} must be > 0")
        if self.kernel_trials < 0 or self.min_effect < 0 or not 0 < self.bound_fraction <= 1:
            raise SpecPilotError("campaign config: kernel_trials >= 0, min_effect >= 0 and "
                                 "0 < bound_fraction <= 1")
        if self.start_recipe is not None:
            from specpilot.recipe import STOCK
            from specpilot.recipe import Recipe

            Recipe.from_dict({**STOCK.to_dict(), **self.start_recipe})  # unknown keys fail here
        for name in ("validation_prompts", "validation_tokens", "bench_prompts", "bench_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SpecPilotError(f"campaign config: {name} must be >= 1")

    @classmethod
    def from_dict(cls, data: dict) -> "CampaignConfig":
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecPilotError(f"campaign config: unknown key(s) {unknown}; "
                                 f"known: {sorted(known)}")
        llm = data.pop("llm", {})
        if isinstance(llm, dict):
            llm_known = {f.name for f in dataclasses.fields(LLMAgentConfig)}
            bad = sorted(set(llm) - llm_known)
            if bad:
                raise SpecPilotError(f"campaign config [llm]: unknown key(s) {bad}; known: "
                                     f"{sorted(llm_known)}")
            llm = LLMAgentConfig(**llm)
        try:
            return cls(**data, llm=llm)
        except TypeError as err:
            raise SpecPilotError(f"campaign config: {err}") from err

    @classmethod
    def load(cls, path: str | Path, **overrides) -> "CampaignConfig":
        path = Path(path)
        try:
            text = path.read_text()
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (OSError, json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
            raise SpecPilotError(f"cannot read campaign config {path}: {err}") from err
        return cls.from_dict({**data, **{k: v for k, v in overrides.items() if v is not None}})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def campaign_id(self) -> str:
        """The campaign's name: setting + hash of everything that changes what it measures."""
        keep = {k: v for k, v in self.to_dict().items()
                if k not in ("campaign_dir", "tracking_uri", "ray_address", "num_workers",
                             "time_budget_s", "rounds")}
        return f"{self.setting}-{stable_hash(keep)[:8]}"
