"""The validation twin of a random-weight setting: every width kept, the depth cut, the drafter
reading its target layers at the same relative depths, token forcing in float32; and the places
that token-force (``specpilot validate``, the campaign worker, export) use it."""

import json
from pathlib import Path

import pytest

from specpilot import cli
from specpilot.costmodel.launches import SHRUNK_SIZES
from specpilot.costmodel.launches import shrink_config
from specpilot.errors import SpecPilotError
from specpilot.recipe import STOCK
from specpilot.validation.twin import cut_target
from specpilot.validation.twin import retarget_drafter

SETTINGS = Path(__file__).resolve().parents[2] / "settings"


def _configs(name: str) -> tuple[dict, dict]:
    folder = SETTINGS / name
    return (json.loads((folder / "target_config.json").read_text()),
            json.loads((folder / "drafter_config.json").read_text()))


def test_qwen_seed_twin_keeps_every_width_and_the_hybrid_pattern():
    from specpilot.engines.models.qwen3_5 import Qwen3_5TextArgs

    target, drafter = _configs("h200_c1_qwen38-27b_dflash2")
    cut = cut_target(target, 8)
    assert cut["num_hidden_layers"] == 8 and target["num_hidden_layers"] == 64
    assert {k: v for k, v in cut.items() if k != "num_hidden_layers"} == \
        {k: v for k, v in target.items() if k != "num_hidden_layers"}
    types = Qwen3_5TextArgs.from_hf(cut).layer_types
    assert types == ("linear_attention",) * 3 + ("full_attention",) + \
        ("linear_attention",) * 3 + ("full_attention",)
    moved = retarget_drafter(drafter, 64, 8)
    # [5, 19, 33, 47, 61] of 64 layers at the same relative depths of 8
    assert moved["dflash_config"]["target_layer_ids"] == [1, 2, 4, 5, 7]
    assert moved["num_target_layers"] == 8 and moved["hidden_size"] == drafter["hidden_size"]


def test_muse_seed_twin_cuts_the_nested_text_config():
    target, drafter = _configs("h200_c1_muse-glimmer-30b_dflash2")
    with_types = {**target, "text_config": {**target["text_config"],
                                            "layer_types": ["sliding"] * 51 + ["full"]}}
    assert cut_target(with_types, 8)["text_config"]["layer_types"] == ["sliding"] * 8
    cut = cut_target(target, 8)
    assert cut["text_config"]["num_hidden_layers"] == 8
    assert cut["text_config"]["hidden_size"] == target["text_config"]["hidden_size"]
    moved = retarget_drafter(drafter, 52, 8)
    assert moved["dflash_config"]["target_layer_ids"] == [0, 2, 3, 5, 7]


def test_a_twin_too_shallow_for_the_drafter_or_the_target_is_a_clear_error():
    target, drafter = _configs("h200_c1_qwen38-27b_dflash2")
    with pytest.raises(SpecPilotError, match="too shallow for the drafter's 5 target layers"):
        retarget_drafter(drafter, 64, 4)
    with pytest.raises(SpecPilotError, match="depth 80 exceeds the target's 64 layers"):
        cut_target(target, 80)
    with pytest.raises(SpecPilotError, match=r"\[validation\] depth must be an integer >= 2"):
        from specpilot.settings import Validation

        Validation(depth=1)


def _seed_like_setting(root: Path, name: str = "cpu_seed_like") -> str:
    """A random-weight setting of the Qwen3.8-27B + DFlash2 structure (64 layers, 5 drafter taps)
    at tiny widths, in bf16, whose candidates are token-forced on an 8-layer float32 twin."""
    sizes = {**SHRUNK_SIZES, "vocab_size": 4096}  # the generated tokenizer's ids fit
    target, drafter = (shrink_config(c, sizes) for c in _configs("h200_c1_qwen38-27b_dflash2"))
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "target_config.json").write_text(json.dumps(target))
    (folder / "drafter_config.json").write_text(json.dumps(drafter))
    (folder / "setting.toml").write_text(f"""
name = "{name}"
gpu = "cpu"
tokenizer = "generated:tiny"

[target]
source = "random:target_config.json"
seed = 0

[drafter]
source = "random:drafter_config.json"
seed = 1

[engine]
device = "cpu"
dtype = "bfloat16"
max_len = 256

[scenario]
num_prompts = 2
max_new_tokens = 8

[validation]
num_prompts = 2
max_new_tokens = 12
epsilon = 0.05
depth = 8
dtype = "float32"
""")
    return name


@pytest.fixture
def seed_like(tmp_path, monkeypatch):
    import specpilot.settings

    monkeypatch.setattr(specpilot.settings, "SETTINGS_DIR", tmp_path / "settings")
    monkeypatch.setenv("SPECPILOT_RESULTS_DIR", str(tmp_path / "results"))
    return _seed_like_setting(tmp_path / "settings")


def test_validate_runs_on_the_twin(seed_like, tmp_path, capsys):
    from specpilot.bench import store
    from specpilot.settings import load_setting
    from specpilot.validation.twin import validation_models

    twin = validation_models(load_setting(seed_like))
    assert twin.target.num_layers == 8 and twin.setting.engine.dtype == "float32"
    assert twin.target.lm_head.weight.dtype.is_floating_point
    assert str(twin.target.lm_head.weight.dtype) == "torch.float32"
    assert cli.main(["validate", seed_like, "--engine", "stock"]) == 0
    assert f"PASS {seed_like} --engine stock" in capsys.readouterr().out
    [row] = store.read_table(tmp_path / "results", kind="validate").to_pylist()
    record = json.loads(row["metrics_json"])
    assert (record["dtype"], record["depth"]) == ("float32", 8)
    # the deliberately broken engine fails on the twin too
    assert cli.main(["validate", seed_like, "--engine", "broken:accept-all-drafts"]) == 1


def test_the_campaign_worker_token_forces_on_the_twin_and_times_the_full_models(seed_like):
    from specpilot.workers import evaluate

    job = {"setting": seed_like, "recipe": STOCK.replace(block_size=4).to_dict(),
           "champion": STOCK.to_dict(), "name": "block-size-4",
           "bench": {"num_prompts": 1, "max_new_tokens": 8, "budget_s": 1.0, "max_rounds": 2}}
    try:
        out = evaluate.candidate(job)
        assert out["valid"], out["validation"]
        assert out["validation"]["num_tokens"] == 24  # 2 prompts x 12: the [validation] budget
        assert out["compare"]["median_speedup"] > 0
        models = evaluate._models(seed_like)
        assert models.target.num_layers == 64  # speed ran on the full-depth bf16 models
        assert str(models.target.lm_head.weight.dtype) == "torch.bfloat16"
        [twin] = evaluate._TWINS.values()
        assert twin.target.num_layers == 8 and twin.setting.engine.dtype == "float32"
        canary = evaluate.candidate({**job, "fault": "accept-all-drafts", "name": "canary"})
        assert not canary["valid"] and "compare" not in canary
    finally:
        evaluate._LOADED.clear()
        evaluate._TWINS.clear()


def test_a_recipe_with_bf16_only_kernels_is_forced_on_a_twin_in_the_engine_dtype(seed_like):
    """The Triton GEMM runs only in bf16: on a float32 twin it would fall back to torch's GEMM
    unchecked, so its recipes get the cut twin in the engine's bf16."""
    from specpilot.settings import load_setting
    from specpilot.validation.twin import needs_engine_dtype
    from specpilot.validation.twin import validation_models

    triton = STOCK.replace(gemm="triton")
    assert needs_engine_dtype(triton) and not needs_engine_dtype(STOCK)
    assert not needs_engine_dtype(STOCK.replace(w12=("lm_head",)))  # W12 runs in float32 too
    twin = validation_models(load_setting(seed_like), recipe=triton)
    assert twin.target.num_layers == 8 and twin.setting.engine.dtype == "bfloat16"
    assert validation_models(load_setting(seed_like), recipe=triton, dtype="float32") \
        .setting.engine.dtype == "float32"  # an explicit dtype still wins


def test_a_w12_recipe_is_forced_on_the_float32_twin_whose_weights_hold_bf16_values(seed_like,
                                                                                    capsys):
    """The float32 twin of a bf16 setting rounds its random weights to bf16 values, so W12 packs
    them losslessly and a W12 recipe is token-forced there (float32 activations), not on a bf16
    twin whose near-ties reject any GEMM that is not bit-identical."""
    import torch

    from specpilot.settings import load_setting
    from specpilot.validation.twin import validation_models

    twin = validation_models(load_setting(seed_like), recipe=STOCK.replace(w12=("target",)))
    assert twin.setting.engine.dtype == "float32" and twin.bf16_values
    for model in (twin.target, twin.drafter):
        for param in model.parameters():
            assert torch.equal(param.to(torch.bfloat16).float(), param)
    assert cli.main(["validate", seed_like, "--engine", "stock+w12-target+w12-lm-head"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_a_cut_that_would_shift_a_derived_layer_pattern_is_refused():
    target, _ = _configs("h200_c1_muse-glimmer-30b_dflash2")  # global every 4th from the last
    with pytest.raises(SpecPilotError, match="layers - depth is a multiple of 4"):
        cut_target(target, 6)


@pytest.mark.parametrize("name", ["h200_c1_qwen38-27b_dflash2", "h200_c1_qwen38-27b_dspark",
                                  "h200_c1_muse-glimmer-30b_dflash2",
                                  "h200_c1_muse-glimmer-30b_dspark",
                                  "h200_c32_qwen38-27b_dflash2",
                                  "h200_c32_muse-glimmer-30b_dflash2",
                                  "h200_c64_muse-glimmer-30b_dflash2"])
def test_every_h200_seed_setting_has_a_twin_its_drafter_fits(name):
    """The seed settings name an 8-layer float32 twin, and their drafters (DSpark: 8 taps) fit it
    (built on the meta device: shapes only)."""
    from specpilot.costmodel.phases import _meta_model
    from specpilot.settings import load_setting

    setting = load_setting(name)
    assert (setting.validation.depth, setting.validation.dtype) == (8, "float32")
    target, drafter = _configs(name)
    layers = target.get("text_config", target)["num_hidden_layers"]
    twin_target = _meta_model(cut_target(target, 8))
    _meta_model(retarget_drafter(drafter, layers, 8)).check_target(twin_target)
    assert twin_target.num_layers == 8
