"""Model registry keyed by the HF ``architectures`` class name (``model_type`` collides: DFlash says qwen3).

``build_model(config, device, dtype)`` makes an empty model; ``load_model(path, ...)`` fills it from a
checkpoint directory; ``random_model(config, ...)`` fills it with seed-scale random weights.
"""

import importlib
from pathlib import Path

import torch

from specpilot.engines.models.loader import load_weights
from specpilot.engines.models.loader import read_config
from specpilot.errors import CheckpointError

ARCHITECTURES = {
    "Qwen3_5ForCausalLM": "specpilot.engines.models.qwen3_5:Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration":
        "specpilot.engines.models.qwen3_5:Qwen3_5ForConditionalGeneration",
    "Qwen3ForCausalLM": "specpilot.engines.models.qwen3:Qwen3ForCausalLM",
    "MuseGlimmerForConditionalGeneration":
        "specpilot.engines.models.muse_glimmer:MuseGlimmerForConditionalGeneration",
    "MuseGlimmerAssistantModel": "specpilot.engines.models.dflash:MuseGlimmerAssistantModel",
    "DFlashDraftModel": "specpilot.engines.models.dflash:DFlashDraftModel",
    "DFlash2DraftModel": "specpilot.engines.models.dflash:DFlash2DraftModel",
    "DSparkDraftModel": "specpilot.engines.models.dspark:DSparkDraftModel",
    "Qwen3DSparkModel": "specpilot.engines.models.dspark:DSparkDraftModel",
}


def model_class(config: dict):
    """The class registered for ``config["architectures"][0]``; a clear error for anything else."""
    archs = config.get("architectures") or []
    if not archs:
        raise CheckpointError("config.json has no 'architectures' entry; supported: "
                              + ", ".join(ARCHITECTURES))
    arch = archs[0]
    if arch not in ARCHITECTURES:
        raise CheckpointError(f"unknown architecture {arch!r}; supported: {', '.join(ARCHITECTURES)}")
    module_name, class_name = ARCHITECTURES[arch].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise CheckpointError(f"architecture {arch} failed to import from {module_name}: {err}") from err
    return getattr(module, class_name)


def build_model(config: dict, device="cpu", dtype=torch.float32, **kwargs):
    """An uninitialised model of ``config``'s architecture, materialised on ``device`` in ``dtype``."""
    cls = model_class(config)
    with torch.device("meta"):
        model = cls(config, **kwargs)
    model = model.to_empty(device=device).to(dtype)
    if hasattr(model, "tie_weights"):  # materialising gives each tied name its own tensor
        model.tie_weights()
    model._init_buffers()
    return model.eval()


def load_model(path: str | Path, device="cpu", dtype=torch.float32, **kwargs):
    """Build the model a checkpoint directory's config names and load its safetensors weights."""
    config = read_config(path)
    model = build_model(config, device, dtype, **kwargs)
    load_weights(model, path, model.checkpoint_name)
    return model


def random_model(config: dict, device="cpu", dtype=torch.float32, seed: int = 0, **kwargs):
    """Same-shaped random weights, generated on ``device`` (never downloaded)."""
    model = build_model(config, device, dtype, **kwargs)
    generator = torch.Generator(device=device).manual_seed(seed)
    model.init_random_(generator)
    return model
