"""From a setting to loaded models, a tokenizer and engines (one recipe each, sharing the weights)."""

import dataclasses
import json
import os
from pathlib import Path

import torch

from specpilot.errors import SpecPilotError
from specpilot.recipe import Recipe
from specpilot.settings import ModelSource
from specpilot.settings import Setting

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclasses.dataclass
class Models:
    target: object
    drafter: object | None
    tokenizer: object
    setting: Setting

    def engine(self, recipe: Recipe):
        from specpilot.engines.engine import Engine

        return Engine(self.target, self.drafter, recipe, max_len=self.setting.engine.max_len)


def _hf_snapshot(spec: str) -> Path:
    """The local HF-cache snapshot of ``repo@revision`` (a commit or a ref such as main)."""
    repo, _, revision = spec.partition("@")
    revision = revision or "main"
    hub = Path(os.environ.get("HF_HUB_CACHE", Path(os.environ.get(
        "HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"))
    root = hub / f"models--{repo.replace('/', '--')}"
    ref = root / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshot = root / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        rev = f" --revision {revision}" if revision else ""
        raise SpecPilotError(f"weights not present at {snapshot}; download with "
                             f"`huggingface-cli download {repo}{rev}` (nothing here downloads them)")
    return snapshot


def resolve(source: ModelSource, setting: Setting, role: str) -> Path | dict:
    """A checkpoint directory, or (``random:``) the architecture config dict."""
    kind, _, rest = source.source.partition(":")
    if kind == "generated":
        from specpilot import tiny

        if rest in tiny.GENERATED:
            return tiny.GENERATED[rest](source.seed)
        if rest in tiny.DRAFTERS:
            return tiny.tiny_drafter(rest, source.seed)
        raise SpecPilotError(f"setting {setting.name}: unknown generated {role} {rest!r}")
    if kind == "random":
        path = setting.directory / rest
        if not path.is_file():
            raise SpecPilotError(f"setting {setting.name}: {role} config {path} not found")
        return json.loads(path.read_text())
    if kind == "hf":
        return _hf_snapshot(rest)
    path = Path(source.source).expanduser()
    if not path.is_dir():
        raise SpecPilotError(f"setting {setting.name}: {role} checkpoint directory {path} not found")
    return path


def _load(source: ModelSource, setting: Setting, role: str):
    from specpilot.engines.models import load_model
    from specpilot.engines.models import random_model

    device, dtype = setting.engine.device, DTYPES[setting.engine.dtype]
    resolved = resolve(source, setting, role)
    if isinstance(resolved, dict):
        return random_model(resolved, device, dtype, seed=source.seed)
    return load_model(resolved, device, dtype)


def load_tokenizer(setting: Setting, target_dir: Path | None):
    from tokenizers import Tokenizer

    from specpilot import tiny

    if setting.tokenizer == "generated:tiny":
        return Tokenizer.from_file(str(tiny.TOKENIZER_FILE))
    if setting.tokenizer == "target" and target_dir is not None:
        path = target_dir / "tokenizer.json"
        if not path.is_file():
            raise SpecPilotError(f"no tokenizer.json in {target_dir}")
        return Tokenizer.from_file(str(path))
    raise SpecPilotError(f"setting {setting.name}: tokenizer must be 'target' (checkpoint) or "
                         f"'generated:tiny', got {setting.tokenizer!r}")


def load_models(setting: Setting, with_drafter: bool = True) -> Models:
    """Load (or generate, or randomly initialise) the setting's target, drafter and tokenizer."""
    target = _load(setting.target, setting, "target")
    drafter = None
    if with_drafter and setting.drafter is not None:
        drafter = _load(setting.drafter, setting, "drafter")
        drafter.check_target(target)
    target_dir = resolve(setting.target, setting, "target")
    tokenizer = load_tokenizer(setting, target_dir if isinstance(target_dir, Path) else None)
    return Models(target, drafter, tokenizer, setting)
