"""Bad checkpoints get one clear error each (never a stack trace from deep inside torch)."""

import json
import shutil

import pytest

from specpilot import tiny
from specpilot.engines.engine import Engine
from specpilot.engines.models import load_model
from specpilot.errors import CheckpointError
from specpilot.recipe import STOCK


def _sharded_copy(tmp_path):
    src = tiny.tiny_target()
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    from safetensors.torch import load_file
    from safetensors.torch import save_file

    tensors = load_file(str(dst / "model.safetensors"))
    (dst / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(dst / shard))
        weight_map.update({k: shard for k in keys})
    (dst / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return dst


def test_sharded_checkpoint_loads(tmp_path):
    model = load_model(_sharded_copy(tmp_path))
    assert model.num_layers == 8


def test_missing_shard(tmp_path):
    path = _sharded_copy(tmp_path)
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing shard.*model-00002-of-00002"):
        load_model(path)


def test_unknown_architecture(tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(tiny.tiny_target(), path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unknown architecture 'LlamaForCausalLM'; supported"):
        load_model(path)


def test_drafter_layer_ids_beyond_target(tmp_path, tiny_models):
    path = tmp_path / "draft"
    shutil.copytree(tiny.tiny_drafter("tiny-dflash2"), path)
    config = json.loads((path / "config.json").read_text())
    config["dflash_config"]["target_layer_ids"] = [1, 3, 9]
    (path / "config.json").write_text(json.dumps(config))
    drafter = load_model(path)
    with pytest.raises(CheckpointError, match=r"target_layer_ids \[1, 3, 9\] include \[9\], outside"):
        Engine(tiny_models.target, drafter, STOCK)


def test_missing_weight(tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(tiny.tiny_target(), path)
    from safetensors.torch import load_file
    from safetensors.torch import save_file

    tensors = load_file(str(path / "model.safetensors"))
    tensors.pop("lm_head.weight")
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="lacks 1 weight.*lm_head.weight"):
        load_model(path)
