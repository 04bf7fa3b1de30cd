"""Read HF checkpoint directories: config.json and safetensors weights (single file or sharded index)."""

import json
from pathlib import Path

import torch
from torch import nn

from specpilot.errors import CheckpointError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def read_config(path: str | Path) -> dict:
    """The checkpoint's config.json as a dict; a clear error when the directory or file is missing."""
    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise CheckpointError(f"no config.json in checkpoint directory {path}")
    try:
        return json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{config_file} is not valid JSON: {err}") from err


def weight_files(path: str | Path) -> dict[str, list[str]]:
    """Map each safetensors file of the checkpoint to the tensor names it holds (None = all)."""
    path = Path(path)
    index_file = path / INDEX_FILE
    if index_file.is_file():
        weight_map = json.loads(index_file.read_text())["weight_map"]
        shards: dict[str, list[str]] = {}
        for name, shard in weight_map.items():
            shards.setdefault(shard, []).append(name)
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise CheckpointError(
                f"checkpoint {path} is missing shard(s) {', '.join(missing)} listed in {INDEX_FILE}")
        return shards
    if (path / SINGLE_FILE).is_file():
        return {SINGLE_FILE: None}
    raise CheckpointError(f"no {SINGLE_FILE} or {INDEX_FILE} in checkpoint directory {path}")


@torch.no_grad()
def load_weights(model: nn.Module, path: str | Path, rename=lambda name: name) -> None:
    """Copy every checkpoint tensor into the parameter ``rename(name)`` names (None = skip it).

    Every parameter of ``model`` must be filled exactly once, with the right shape.
    """
    from safetensors import safe_open

    path = Path(path)
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    for shard in weight_files(path):
        with safe_open(str(path / shard), framework="pt", device="cpu") as f:
            for name in f.keys():
                ours = rename(name)
                if ours is None or ours not in params:
                    continue
                tensor = f.get_tensor(name)
                param = params[ours]
                if tuple(tensor.shape) != tuple(param.shape):
                    raise CheckpointError(
                        f"{path}: tensor {name} has shape {tuple(tensor.shape)}, "
                        f"the model expects {tuple(param.shape)} for {ours}")
                param.copy_(tensor.to(dtype=param.dtype))
                loaded.add(ours)
    missing = sorted(set(params) - loaded)
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise CheckpointError(f"checkpoint {path} lacks {len(missing)} weight(s): {shown}")
