"""The mechanism catalog (``catalog.toml``) and the setting features that decide what applies.

A mechanism is data: a recipe delta, the decode phase whose gap it targets, the cost-model term
that predicts its effect, and requirements on the setting. Applying one is
``champion.replace(**delta)``; nothing in the engine branches on a mechanism's name.
"""

import dataclasses
import tomllib
from pathlib import Path

from specpilot.errors import SpecPilotError

CATALOG_FILE = Path(__file__).with_name("catalog.toml")
PHASES = ("verify", "draft", "commit", "overhead", "ar")


@dataclasses.dataclass(frozen=True)
class Mechanism:
    name: str
    delta: dict
    phase: str
    term: str
    requires: dict = dataclasses.field(default_factory=dict)
    fault: str | None = None
    canary: bool = False

    def applies_to(self, features: dict) -> bool:
        for key, wanted in self.requires.items():
            have = features.get(key)
            if isinstance(wanted, list):
                if have not in wanted:
                    return False
            elif have != wanted:
                return False
        return True


COST_MODEL = "cost-model"
"""A delta value the catalog cannot write down once for every setting: resolved per setting by the
function :data:`RESOLVERS` names for that field (still data in the catalog, and numbers in the
recipe a proposal builds)."""
RESOLVERS = {"verify_widths": "specpilot.search.gaps:occupancy_widths"}


def resolve_delta(mechanism: Mechanism, setting) -> dict | None:
    """``mechanism.delta`` with every ``"cost-model"`` value computed for ``setting`` (a Setting,
    or its name: loaded only if some value needs it); None when the cost model has nothing to
    offer there (e.g. the whole block is best at every occupancy)."""
    import importlib

    out = {}
    for field, value in mechanism.delta.items():
        if value != COST_MODEL:
            out[field] = value
            continue
        if isinstance(setting, str):
            from specpilot.settings import load_setting

            setting = load_setting(setting)
        module, _, name = RESOLVERS[field].partition(":")
        resolved = getattr(importlib.import_module(module), name)(setting)
        if not resolved:
            return None
        out[field] = resolved
    return out


def load_catalog(path: Path = CATALOG_FILE) -> list[Mechanism]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SpecPilotError(f"cannot read mechanism catalog {path}: {err}") from err
    known = {f.name for f in dataclasses.fields(Mechanism)}
    mechanisms = []
    for entry in data.get("mechanism", []):
        unknown = sorted(set(entry) - known)
        if unknown:
            raise SpecPilotError(f"{path}: mechanism {entry.get('name')!r} has unknown key(s) "
                                 f"{unknown}")
        mechanism = Mechanism(**entry)
        if mechanism.phase not in PHASES:
            raise SpecPilotError(f"{path}: mechanism {mechanism.name!r}: phase must be one of "
                                 f"{PHASES}")
        unresolvable = sorted(k for k, v in mechanism.delta.items()
                              if v == COST_MODEL and k not in RESOLVERS)
        if unresolvable:
            raise SpecPilotError(f"{path}: mechanism {mechanism.name!r}: no cost-model resolver "
                                 f"for {unresolvable} (known: {sorted(RESOLVERS)})")
        mechanisms.append(mechanism)
    return mechanisms


def _config(setting, source, role) -> dict:
    from specpilot.build import resolve
    from specpilot.engines.models.loader import read_config

    resolved = resolve(source, setting, role)
    return resolved if isinstance(resolved, dict) else read_config(resolved)


def _hybrid(config: dict) -> bool:
    text = config.get("text_config", config)
    layer_types = text.get("layer_types") or []
    return any("linear" in t for t in layer_types) or "linear_num_value_heads" in text


def setting_features(setting) -> dict:
    """What a mechanism's ``requires`` and the knowledge store's similarity look at."""
    target = _config(setting, setting.target, "target")
    drafter = _config(setting, setting.drafter, "drafter") if setting.drafter else None
    block = None
    if drafter is not None:
        from specpilot.costmodel.phases import _meta_model

        block = int(_meta_model(drafter).block_size)
    return {"gpu": setting.gpu, "device": "cuda" if setting.engine.device.startswith("cuda")
            else "cpu", "dtype": setting.engine.dtype,
            "target": (target.get("architectures") or ["?"])[0], "hybrid": _hybrid(target),
            "drafter": (drafter.get("architectures") or ["?"])[0] if drafter else None,
            "scenario": "c1" if setting.scenario.concurrency == 1 else "cN",
            "block_size": block}


def model_configs(setting) -> tuple[dict, dict | None]:
    """The target's and drafter's config dicts (generating tiny checkpoints if needed)."""
    target = _config(setting, setting.target, "target")
    drafter = _config(setting, setting.drafter, "drafter") if setting.drafter else None
    return target, drafter
