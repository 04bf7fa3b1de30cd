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
    """A setting's loaded models; ``engine(recipe)`` builds engines that share these weights.

    A recipe with ``w12`` groups runs on a view of the target (and drafter) whose chosen Linears
    multiply by W12-packed weights (:func:`specpilot.engines.models.layers.w12_view`). Each weight
    is packed once per ``Models`` and each view built once per set of packed Linears, so engines of
    any number of W12 recipes share them. The bf16 weights stay resident: the AR reference and
    every non-W12 engine still read them, so W12 adds its ~1.5 bytes per packed weight on top.
    """

    target: object
    drafter: object | None
    tokenizer: object
    setting: Setting
    bf16_values: bool = False
    """Float32 models whose weights all hold bf16 values (a validation twin of a bf16 setting):
    W12, lossless for bf16 values, may pack them."""
    _w12_weights: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
    _w12_views: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    def engine(self, recipe: Recipe):
        from specpilot.engines.engine import Engine

        target, drafter = self.target, self.drafter
        if recipe.w12:
            target, drafter = self._w12_models(recipe)
        return Engine(target, drafter, recipe, max_len=self.setting.engine.max_len)

    def _w12_models(self, recipe: Recipe):
        """Target and drafter with ``recipe.w12``'s groups packed (cached views)."""
        from specpilot.engines.models.layers import linear_names

        dtype = self.setting.engine.dtype
        if dtype != "bfloat16" and not self.bf16_values:
            raise SpecPilotError(f"recipe {recipe.name!r}: w12 {list(recipe.w12)} needs a "
                                 f"bfloat16 engine (W12 is lossless for bf16 weights only), but "
                                 f"setting {self.setting.name} runs {dtype}")
        target = self._w12_view("target", self.target, [
            name for name in linear_names(self.target)
            if ("lm_head" if name == "lm_head" else "target") in recipe.w12], recipe.w12_order)
        drafter = self.drafter
        if "drafter" in recipe.w12 and drafter is not None:
            drafter = self._w12_view("drafter", drafter, linear_names(drafter), recipe.w12_order)
        return target, drafter

    def _w12_view(self, role: str, model, names: list[str], order: str):
        from specpilot.engines.models.layers import W12Weight
        from specpilot.engines.models.layers import w12_view

        if not names:
            return model
        key = (role, tuple(names), order)
        if key not in self._w12_views:
            for name in names:
                if (role, name, order) not in self._w12_weights:
                    weight = model.get_submodule(name).weight
                    self._w12_weights[role, name, order] = W12Weight(weight, order)
            self._w12_views[key] = w12_view(model, {n: self._w12_weights[role, n, order]
                                                    for n in names})
        return self._w12_views[key]

    def w12_nbytes(self) -> int:
        """Device bytes of every W12 weight packed so far (on top of the bf16 weights)."""
        return sum(w.nbytes for w in self._w12_weights.values())


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
    if kind == "bundled":
        from specpilot import tiny

        if rest not in tiny.BUNDLED:
            raise SpecPilotError(f"setting {setting.name}: unknown bundled {role} {rest!r}; "
                                 f"bundled: {', '.join(tiny.BUNDLED)}")
        path = tiny.BUNDLED[rest]
        if not (path / "config.json").is_file():
            raise SpecPilotError(f"setting {setting.name}: bundled {role} {path} is missing; "
                                 "rebuild it with `python experiments/proxy/train_tiny.py`")
        return path
    if kind == "random":
        path = setting.directory / rest
        if not path.is_file():
            raise SpecPilotError(f"setting {setting.name}: {role} config {path} not found")
        return json.loads(path.read_text())
    if kind == "hf":
        return _hf_snapshot(rest)
    from specpilot.tiny import home

    path = Path(os.path.expandvars(source.source.replace("$SPECPILOT_HOME", str(home())))
                ).expanduser()
    if not path.is_dir():
        raise SpecPilotError(f"setting {setting.name}: {role} checkpoint directory {path} not found"
                             f"{'; ' + setting.description.strip().splitlines()[-1] if setting.description else ''}")
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
