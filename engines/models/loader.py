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


def _merged_shards(model: nn.Module) -> dict[str, tuple[str, str]]:
    """``<parent>.<shard>`` -> (merged module path, shard) for every MergedLinear of ``model``."""
    from specpilot.engines.models.layers import MergedLinear

    table = {}
    for path, module in model.named_modules():
        if isinstance(module, MergedLinear):
            parent = path.rpartition(".")[0]
            for shard in module.offsets:
                table[f"{parent}.{shard}" if parent else shard] = (path, shard)
    return table


@torch.no_grad()
def load_weights(model: nn.Module, path: str | Path, rename=lambda name: name) -> None:
    """Copy every checkpoint tensor into the parameter ``rename(name)`` names (None = skip it).

    A name that addresses one shard of a merged linear (``...q_proj.weight`` of a ``qkv_proj``) fills
    that shard's rows. Every parameter (every shard) of ``model`` must be filled, with the right shape.
    """
    from safetensors import safe_open

    path = Path(path)
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    merged = _merged_shards(model)
    loaded: set[tuple[str, str | None]] = set()
    expected = {(name, None) for name in params}
    for module_path, shard in merged.values():
        for suffix in ("weight", "bias"):
            if f"{module_path}.{suffix}" in params:
                expected.discard((f"{module_path}.{suffix}", None))
                expected.add((f"{module_path}.{suffix}", shard))
    for shard_file in weight_files(path):
        with safe_open(str(path / shard_file), framework="pt", device="cpu") as f:
            for name in f.keys():
                ours = rename(name)
                if ours is None:
                    continue
                owner, _, suffix = ours.rpartition(".")
                if ours in params:
                    target, key = params[ours], (ours, None)
                elif owner in merged:
                    module_path, shard = merged[owner]
                    start, size = modules[module_path].offsets[shard]
                    key = (f"{module_path}.{suffix}", shard)
                    target = params[key[0]].narrow(0, start, size)
                else:
                    continue
                tensor = f.get_tensor(name)
                if tuple(tensor.shape) != tuple(target.shape):
                    raise CheckpointError(
                        f"{path}: tensor {name} has shape {tuple(tensor.shape)}, "
                        f"the model expects {tuple(target.shape)} for {ours}")
                target.copy_(tensor.to(dtype=target.dtype))
                loaded.add(key)
    missing = sorted(f"{n}[{s}]" if s else n for n, s in expected - loaded)
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise CheckpointError(f"checkpoint {path} lacks {len(missing)} weight(s): {shown}")


def checkpoint_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under checkpoint names (merged linears split back into their shards)."""
    from specpilot.engines.models.layers import MergedLinear

    out = {}
    merged = {path: m for path, m in model.named_modules() if isinstance(m, MergedLinear)}
    for name, tensor in model.state_dict().items():
        module_path, _, suffix = name.rpartition(".")
        if module_path in merged:
            parent = module_path.rpartition(".")[0]
            for shard, (start, size) in merged[module_path].offsets.items():
                key = f"{parent}.{shard}.{suffix}" if parent else f"{shard}.{suffix}"
                out[key] = tensor.narrow(0, start, size).contiguous()
        else:
            out[name] = tensor.contiguous()
    return out
