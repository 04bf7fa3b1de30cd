"""Deployment settings: ``settings/<name>/setting.toml`` (DESIGN.md §2), loaded with strict keys.

Model sources (``[target] source`` / ``[drafter] source``):
- ``generated:<name>``: a tiny checkpoint generated deterministically on first use (``specpilot.tiny``);
- ``bundled:<name>``: a trained tiny checkpoint shipped in the package (``specpilot.tiny.BUNDLED``,
  trained by experiments/proxy/train_tiny.py);
- ``random:<file.json>``: the architecture config next to the setting, random weights made on the
  device (seed-scale speed runs; never downloaded);
- ``hf:<repo id>@<revision>``: a Hugging Face checkpoint, read from the local HF cache only;
- anything else: a local checkpoint directory.
"""

import dataclasses
import os
import tomllib
from pathlib import Path

from specpilot.errors import SpecPilotError
from specpilot.fingerprint import stable_hash

SETTINGS_DIR = Path(os.environ.get("SPECPILOT_SETTINGS_DIR",
                                   Path(__file__).resolve().parent.parent / "settings"))


@dataclasses.dataclass(frozen=True)
class ModelSource:
    source: str
    seed: int = 0


DTYPES = ("float32", "bfloat16", "float16")


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise SpecPilotError(message)


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    device: str = "cpu"
    dtype: str = "float32"
    max_len: int = 2048

    def __post_init__(self):
        _check(self.device == "cpu" or self.device.startswith("cuda"),
               f"[engine] device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        _check(self.dtype in DTYPES, f"[engine] dtype must be one of {DTYPES}, got {self.dtype!r}")
        _check(isinstance(self.max_len, int) and self.max_len >= 16,
               f"[engine] max_len must be an integer >= 16, got {self.max_len!r}")


@dataclasses.dataclass(frozen=True)
class Scenario:
    concurrency: int = 1
    dataset: str = "gsm8k"
    num_prompts: int = 8
    max_new_tokens: int = 64
    temperature: float = 0.0
    acceptance_profile: str | None = None  # bench on random weights: "tau:<mean>" or a profile file


@dataclasses.dataclass(frozen=True)
class Validation:
    dataset: str = "gsm8k"
    num_prompts: int = 16
    max_new_tokens: int = 64
    epsilon: float = 1e-4
    max_mismatch_rate: float = 0.001
    num_canaries: int = 1
    depth: int | None = None
    """Random-weight settings: token forcing runs on a twin of the models cut to this many target
    layers, every width kept (``specpilot.validation.twin``); None = the setting's models."""
    dtype: str | None = None
    """The dtype token forcing runs in (default: the engine's), e.g. float32 for that twin."""

    @property
    def has_twin(self) -> bool:
        """Whether token forcing runs on a twin of the setting's models (a depth or a dtype)."""
        return self.depth is not None or self.dtype is not None

    def __post_init__(self):
        _check(self.depth is None or (type(self.depth) is int and self.depth >= 2),
               f"[validation] depth must be an integer >= 2, got {self.depth!r}")
        _check(self.dtype in (None, "float32", "bfloat16", "float16"),
               f"[validation] dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        # DESIGN.md §4: mismatches must be near-ties and at most 0.1% of tokens; a setting may be
        # stricter, never looser
        _check(0 <= self.max_mismatch_rate <= 0.001,
               f"[validation] max_mismatch_rate must be in [0, 0.001], got {self.max_mismatch_rate}")
        _check(0 <= self.epsilon <= 0.25,
               f"[validation] epsilon (a logit gap) must be in [0, 0.25], got {self.epsilon}")
        _check(self.num_prompts >= 1 and self.max_new_tokens >= 1 and self.num_canaries >= 0,
               "[validation] num_prompts and max_new_tokens must be >= 1, num_canaries >= 0")


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    gpu: str
    target: ModelSource
    drafter: ModelSource | None
    tokenizer: str = "target"
    description: str = ""
    engine: EngineConfig = EngineConfig()
    scenario: Scenario = Scenario()
    validation: Validation = Validation()
    directory: Path = Path(".")

    def hash(self) -> str:
        data = dataclasses.asdict(self)
        data.pop("directory")
        for key in ("depth", "dtype"):  # settings without a validation twin keep their hash
            if data["validation"][key] is None:
                del data["validation"][key]
        return stable_hash(data)


def _section(cls, data: dict, where: str):
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecPilotError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**data)
    except TypeError as err:
        raise SpecPilotError(f"{where}: {err}") from err


def available() -> list[str]:
    return sorted(p.parent.name for p in SETTINGS_DIR.glob("*/setting.toml"))


def load_setting_file(path: Path) -> Setting:
    """A setting from any ``setting.toml`` (an exported bundle's too), by the same strict rules."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise SpecPilotError(f"{path}: {err}") from err
    where = str(path)
    sections = {"target": ModelSource, "drafter": ModelSource, "engine": EngineConfig,
                "scenario": Scenario, "validation": Validation}
    parsed = {}
    for key, cls in sections.items():
        if key in data:
            parsed[key] = _section(cls, data.pop(key), f"{where} [{key}]")
    if "target" not in parsed:
        raise SpecPilotError(f"{where}: a [target] section is required")
    parsed.setdefault("drafter", None)
    return _section(Setting, {**data, **parsed, "directory": Path(path).parent}, where)


def load_setting(name: str) -> Setting:
    """Read ``settings/<name>/setting.toml``; an unknown name lists the settings that exist."""
    path = SETTINGS_DIR / name / "setting.toml"
    if not path.is_file():
        raise SpecPilotError(f"unknown setting {name!r}; available: {', '.join(available())}")
    setting = load_setting_file(path)
    if setting.name != name:
        raise SpecPilotError(f"{path}: name {setting.name!r} does not match its directory "
                             f"{name!r}")
    return setting
