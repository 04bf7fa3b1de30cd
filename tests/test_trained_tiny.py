"""cpu_c1_tiny ships a trained tiny pair (issue 8): real acceptance on gsm8k, still lossless.

The stock DFlash2 engine runs the setting's own workload (its gsm8k prompts, greedy, every prompt to
its full output length) against the AR engine on the same weights. Greedy decoding draws no random
numbers; the seed is fixed anyway so the test is reproducible by construction.
"""

import json

import pytest
import torch

from specpilot import tiny
from specpilot.bench.workload import workload_for
from specpilot.build import load_models
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

MIN_TAU = 2.0
MAX_SHIPPED_BYTES = 12 * 2**20


@pytest.fixture(scope="module")
def trained():
    return load_models(load_setting("cpu_c1_tiny"))


@pytest.fixture(scope="module")
def runs(trained):
    """(AR result, stock result) per prompt of the setting's workload."""
    torch.manual_seed(0)
    workload = workload_for(trained.setting, trained.tokenizer)
    stock, ar = trained.engine(STOCK), trained.engine(AR)
    return [(ar.generate(list(p), workload.params), stock.generate(list(p), workload.params))
            for p in workload.prompts]


def test_cpu_c1_tiny_loads_the_bundled_pair(trained):
    setting = trained.setting
    assert setting.target.source == "bundled:tiny-trained-qwen3_5"
    assert setting.drafter.source == "bundled:tiny-trained-dflash2"
    assert type(trained.drafter).__name__ == "DFlash2DraftModel"
    assert trained.drafter.block_size == 8
    kinds = [layer.layer_type for layer in trained.target.model.layers]
    assert kinds.count("linear_attention") >= 2 and kinds.count("full_attention") >= 2


def test_stock_reaches_tau_2_on_gsm8k_and_equals_ar(runs):
    steps = []
    for ar, spec in runs:
        assert spec.tokens == ar.tokens  # lossless: greedy spec == greedy AR, token for token
        steps.extend(spec.accept_lengths)
    tau = sum(steps) / len(steps)
    assert tau >= MIN_TAU, f"mean tau {tau:.3f} on {len(runs)} gsm8k prompts"


def test_target_writes_prompt_dependent_text(runs):
    """The acceptance is earned: the target neither collapses onto a constant or a two-token loop,
    nor writes one template whatever the prompt."""
    for ar, _ in runs:
        assert len(set(ar.tokens)) >= 8, ar.tokens
    assert len({tuple(ar.tokens) for ar, _ in runs}) == len(runs)


def test_shipped_files_are_small_16_bit_checkpoints():
    from safetensors import safe_open

    files = [p for d in tiny.BUNDLED.values() for p in d.iterdir()]
    assert sum(p.stat().st_size for p in files) <= MAX_SHIPPED_BYTES
    for directory in tiny.BUNDLED.values():
        assert json.loads((directory / "config.json").read_text())["torch_dtype"] == "bfloat16"
        with safe_open(str(directory / "model.safetensors"), "pt") as f:
            assert {f.get_slice(name).get_dtype() for name in list(f.keys())} == {"BF16"}


def test_bundled_target_matches_transformers(trained):
    transformers = pytest.importorskip("transformers")
    path = tiny.BUNDLED["tiny-trained-qwen3_5"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([trained.tokenizer.encode("Natalia sold clips to 48 of her friends").ids])
    positions = torch.arange(ids.shape[1])[None]
    ours = trained.target(ids, positions, trained.target.new_cache(1, 64)).logits
    with torch.no_grad():
        ref = hf(ids).logits
    assert float((ours - ref).abs().max() / ref.abs().max()) <= 1e-4
