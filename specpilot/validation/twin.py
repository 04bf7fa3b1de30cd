"""The models token forcing runs on: the setting's own, or for a random-weight (seed-scale) setting a
depth-cut twin in another dtype (the setting's ``[validation] depth`` and ``dtype``).

Why a twin: at seed scale the weights are random, and in bf16 over 64 layers their top-2 logit gaps
sit below the rounding that differs between a one-row and a many-row forward, so token forcing
rejects every engine that is not bit-identical to AR, lossless or not (6.8% mismatches for a verify
width change on the H200). The twin keeps every width (hidden size, heads, head dims, vocabulary:
every kernel sees the shapes it sees at full size) and the layer-type pattern, keeps only ``depth``
target layers, and the drafter reads its target layers at the same relative depths; in float32 its
rounding no longer flips tokens, so a mismatch is the engine's. Speed is still measured on the
full-size models.
"""

import contextlib
import copy
import dataclasses

from specpilot.errors import SpecPilotError

PATTERN_PERIOD = 4
"""The targets' derived layer pattern (Qwen3.5: full attention every 4th layer from the first;
Muse-Glimmer: global attention every 4th from the last) when a config lists no ``layer_types``."""


def cut_target(config: dict, depth: int) -> dict:
    """A target config (nested text configs too) with ``depth`` layers: ``num_hidden_layers`` and
    every per-layer list (``layer_types``, ``layer_rope_theta`` ..) cut to their first ``depth``
    entries."""
    out = copy.deepcopy(config)
    found = []

    def walk(node: dict) -> None:
        layers = node.get("num_hidden_layers")
        if isinstance(layers, int):
            if depth > layers:
                raise SpecPilotError(f"[validation] depth {depth} exceeds the target's {layers} "
                                     "layers")
            period = node.get("full_attention_interval", PATTERN_PERIOD)
            if not isinstance(node.get("layer_types"), list) and (layers - depth) % period:
                raise SpecPilotError(  # Muse counts its every-4th global layer from the last one
                    f"[validation] depth {depth}: the target derives its layer pattern (every "
                    f"{period}th layer) from its {layers} layers, and a cut keeps it only when "
                    f"layers - depth is a multiple of {period}")
            found.append(layers)
            node["num_hidden_layers"] = depth
            for key, value in node.items():  # per-layer lists: layer_types, layer_rope_theta ..
                if key.startswith("layer_") and isinstance(value, list) and len(value) == layers:
                    node[key] = value[:depth]
        for value in node.values():
            if isinstance(value, dict):
                walk(value)

    walk(out)
    if not found:
        raise SpecPilotError("[validation] depth: the target config has no num_hidden_layers")
    return out


def retarget_drafter(config: dict, num_layers: int, depth: int) -> dict:
    """A drafter config that reads a ``depth``-layer cut of its ``num_layers``-layer target: every
    ``target_layer_ids`` entry moved to the same relative depth, ``num_target_layers`` set."""
    out = copy.deepcopy(config)

    def move(ids: list[int]) -> list[int]:
        scale = (depth - 1) / max(1, num_layers - 1)
        moved = [round(i * scale) for i in ids]
        if len(set(moved)) != len(moved):
            raise SpecPilotError(f"[validation] depth {depth} is too shallow for the drafter's "
                                 f"{len(ids)} target layers {ids}: they would share layers "
                                 f"{moved}")
        return moved

    def walk(node: dict) -> None:
        for key, value in node.items():
            if key == "target_layer_ids" and isinstance(value, list):
                node[key] = move(value)
            elif key == "num_target_layers" and isinstance(value, int):
                node[key] = depth
            elif isinstance(value, dict):
                walk(value)

    walk(out)
    return out


@contextlib.contextmanager
def strict_float32(on: bool = True):
    """Within: torch's float32 matmuls and convolutions in full precision (no TF32), so that
    float32 token forcing compares the engines' arithmetic, not TF32's 10-bit mantissas; the
    flags are restored after (timings later in the process keep their own). Triton kernels'
    float32 dots follow their own precision argument, not these flags."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    if on:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def needs_engine_dtype(recipe) -> bool:
    """Whether ``recipe`` switches on kernels that only run in bf16 (the Triton skinny GEMM): on a
    float32 twin it would fall back to torch's and go unchecked, so such a recipe is token-forced
    on a twin in the engine's own dtype. W12 is not one: a float32 twin of a bf16 setting holds
    bf16 values (:func:`round_to_bf16_values`), which W12 packs losslessly, and its GEMM runs with
    float32 activations there."""
    return recipe is not None and recipe.gemm == "triton"


def round_to_bf16_values(model) -> None:
    """Round every parameter of a float32 ``model`` to the nearest bf16 value, in place: the twin of
    a bf16 setting then holds weights its W12 recipes can pack losslessly, as the setting's own
    models do (the AR reference and the candidate read the same rounded weights)."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16).to(param.dtype))


def _num_layers(config: dict) -> int:
    return config.get("text_config", config)["num_hidden_layers"]


def validation_models(setting, with_drafter: bool = True, dtype: str | None = None,
                      recipe=None):
    """The ``Models`` token forcing runs on for ``setting``: its own, or its twin when its
    ``[validation]`` names a depth or a dtype (``dtype`` here overrides the setting's; else a
    ``recipe`` with bf16-only kernels keeps the engine's dtype, see :func:`needs_engine_dtype`)."""
    from specpilot.build import load_models

    val = setting.validation
    if dtype is None:
        dtype = setting.engine.dtype if needs_engine_dtype(recipe) else val.dtype
    if val.depth is None and dtype is None:
        return load_models(setting, with_drafter=with_drafter)
    engine = dataclasses.replace(setting.engine, dtype=dtype or setting.engine.dtype)
    twin = dataclasses.replace(setting, engine=engine)
    if val.depth is None:
        models = load_models(twin, with_drafter=with_drafter)
    else:
        models = _cut_models(setting, twin, with_drafter)
    if engine.dtype == "float32" and setting.engine.dtype == "bfloat16":
        for model in (models.target, models.drafter):  # the values the setting serves
            if model is not None:
                round_to_bf16_values(model)
        models.bf16_values = True
    return models


def _cut_models(setting, twin, with_drafter: bool):
    """The random-weight target (and drafter) of ``setting`` cut to its ``[validation] depth``, in
    the ``twin`` setting's dtype."""
    from specpilot.build import DTYPES
    from specpilot.build import Models
    from specpilot.build import load_tokenizer
    from specpilot.build import resolve
    from specpilot.engines.models import random_model

    depth, device, dtype = setting.validation.depth, twin.engine.device, twin.engine.dtype
    target_config = resolve(setting.target, setting, "target")
    if not isinstance(target_config, dict):
        raise SpecPilotError(f"setting {setting.name}: [validation] depth cuts random-weight "
                             f"models only; its target is {setting.target.source!r}")
    layers = _num_layers(target_config)
    target = random_model(cut_target(target_config, depth), device, DTYPES[dtype],
                          seed=setting.target.seed)
    drafter = None
    if with_drafter and setting.drafter is not None:
        drafter_config = resolve(setting.drafter, setting, "drafter")
        if not isinstance(drafter_config, dict):
            raise SpecPilotError(f"setting {setting.name}: [validation] depth needs a random-weight "
                                 f"drafter too; its drafter is {setting.drafter.source!r}")
        drafter = random_model(retarget_drafter(drafter_config, layers, depth), device,
                               DTYPES[dtype], seed=setting.drafter.seed)
        drafter.check_target(target)
    return Models(target, drafter, load_tokenizer(twin, None), twin)


def twin_of(models, recipe=None):
    """``models`` themselves when their setting validates on its own models, else its validation
    twin for ``recipe`` (run the forcing inside :func:`strict_float32` when it is float32)."""
    if not models.setting.validation.has_twin:
        return models
    return validation_models(models.setting, with_drafter=models.drafter is not None,
                             recipe=recipe)
