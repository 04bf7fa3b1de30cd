"""W12 weights in the engine: the recipe field, packed model views, and decode parity with bf16.

Two paths are checked on CPU. Without a GPU a packed Linear decodes its weight exactly and calls
``F.linear`` (as the bf16 Linear does), so the tiny hybrid target with W12 weights must give the
bf16 engine's logits bit for bit. The W12 GEMM kernel itself is forced through the Triton
interpreter on a smaller dense target (the interpreter is too slow for the hybrid one); its fp32
summation order differs from ``F.linear``'s, so there logits agree to a few bf16 ulps and greedy
tokens may differ only at near-ties.
"""

import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from specpilot import cli
from specpilot.build import Models
from specpilot.build import load_models
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import layers
from specpilot.engines.models import random_model
from specpilot.errors import SpecPilotError
from specpilot.fingerprint import stable_hash
from specpilot.kernels.common.check import check_close
from specpilot.kernels.common.check import gemm_exact
from specpilot.kernels.tuning.ops import synthetic_weight
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe
from specpilot.settings import ModelSource
from specpilot.settings import load_setting
from specpilot.validation import validate_engine

ALL = ("target", "drafter", "lm_head")

# A dense Qwen3 small enough for the Triton interpreter (9 GEMMs per token).
SMALL_TARGET = {"architectures": ["Qwen3ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
                "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
                "head_dim": 32, "vocab_size": 256, "eos_token_id": 0,
                "tie_word_embeddings": False}


def bf16_setting():
    """cpu_c1_tiny's engine in bfloat16, on the generated (random) tiny target and drafter."""
    setting = load_setting("cpu_c1_tiny")
    return dataclasses.replace(
        setting, target=ModelSource("generated:tiny-qwen3_5"),
        drafter=ModelSource("generated:tiny-dflash2"),
        engine=dataclasses.replace(setting.engine, dtype="bfloat16"))


@pytest.fixture(scope="module")
def bf16_models():
    """The tiny Qwen3.5 hybrid target and DFlash2 drafter, loaded in bfloat16."""
    return load_models(bf16_setting())


@pytest.fixture(scope="module")
def prompts(bf16_models):
    texts = ["Natalia sold clips to 48 of her friends in April.",
             "Weng earns $12 an hour for babysitting.",
             "Betty is saving money for a new wallet which costs $100."]
    return [bf16_models.tokenizer.encode(t).ids for t in texts]


def teacher_forced_logits(engine, ids: list[int], num_prompt: int) -> torch.Tensor:
    """Logits [T, V] of a prefill over the prompt, then one decode step per further token."""
    target = engine.target
    cache = target.new_cache(1, len(ids) + 1)
    x = torch.tensor([ids])
    pos = torch.arange(len(ids))[None]
    with torch.inference_mode():
        rows = [target(x[:, :num_prompt], pos[:, :num_prompt], cache).logits[0]]
        for t in range(num_prompt, len(ids)):
            rows.append(target(x[:, t:t + 1], pos[:, t:t + 1], cache).logits[0])
    return torch.cat(rows)


# -- the recipe field ---------------------------------------------------------------------------

@pytest.mark.parametrize("w12, message", [
    (("target", "mlp"), "weight groups"),
    ("target", "weight groups"),
    (("target", "target"), "distinct"),
    ((1,), "weight groups"),
])
def test_recipe_rejects_bad_w12(w12, message):
    with pytest.raises(SpecPilotError, match=message):
        Recipe(name="bad", w12=w12)


def test_recipe_w12_order():
    assert STOCK.w12_order == "rows"
    with pytest.raises(SpecPilotError, match="w12_order must be one of"):
        STOCK.replace(w12=("target",), w12_order="columns")
    with pytest.raises(SpecPilotError, match="w12 packs no weight group"):
        STOCK.replace(w12_order="frag")
    frag = STOCK.replace(w12=("target",), w12_order="frag")
    assert frag.hash() != STOCK.replace(w12=("target",)).hash()


def test_recipe_rejects_w12_drafter_without_speculation():
    with pytest.raises(SpecPilotError, match="w12 'drafter' needs a speculative recipe"):
        AR.replace(w12=("drafter",))


def test_recipe_w12_json_round_trip(tmp_path):
    path = tmp_path / "w12.json"
    path.write_text(json.dumps({"name": "w12", "gemm": "triton", "w12": ["lm_head", "target"]}))
    recipe = Recipe.from_json(path)
    assert recipe.w12 == ("target", "lm_head")  # a tuple, in canonical order
    assert Recipe.from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe
    assert STOCK.w12 == () and AR.w12 == ()


def test_recipe_hash_covers_w12():
    assert STOCK.replace(w12=("target",)).hash() != STOCK.hash()
    assert (STOCK.replace(w12=("lm_head", "target")).hash()
            == STOCK.replace(w12=("target", "lm_head")).hash())
    # recipes without W12 keep the hash they had before the field existed (and before the tree
    # verification, batched prefill and snapshot kernel fields, which likewise stay out of the
    # hash of recipes that leave them at their defaults)
    new_fields = ("name", "w12", "tree_branches", "tree_positions", "tree_max_nodes",
                  "batched_prefill", "gdn_snapshot", "admit_ratio", "admit_max_wait_steps",
                  "verify_widths", "two_stage", "draft_depth", "overlap_schedule", "w12_order")
    old = {k: v for k, v in STOCK.to_dict().items() if k not in new_fields}
    assert STOCK.hash() == stable_hash(old)


def test_w12_needs_a_bf16_engine(tiny_models):
    assert tiny_models.setting.engine.dtype == "float32"
    with pytest.raises(SpecPilotError, match=r"recipe 'ar_w12'.*bfloat16.*runs float32"):
        tiny_models.engine(AR.replace(name="ar_w12", w12=("target",)))


# -- packed views -------------------------------------------------------------------------------

def test_views_share_weights_and_are_cached(bf16_models):
    m = bf16_models
    engine = m.engine(AR.replace(name="a", w12=("target",)))
    view = engine.target
    assert view is not m.target
    assert m.engine(STOCK.replace(name="b", w12=("target",))).target is view
    packed = {n for n in layers.linear_names(view) if view.get_submodule(n).w12 is not None}
    assert packed == set(layers.linear_names(m.target)) - {"lm_head"}
    assert all(m.target.get_submodule(n).w12 is None for n in layers.linear_names(m.target))
    ours, theirs = dict(view.named_parameters()), dict(m.target.named_parameters())
    assert ours.keys() == theirs.keys() and all(ours[k] is theirs[k] for k in ours)
    num_weights = sum(view.get_submodule(n).weight.numel() for n in packed)
    num_bytes = sum(m._w12_weights["target", n, "rows"].nbytes for n in packed)
    # 1.5 B per weight plus escapes; the tiny model's down_proj (K2 = 432) pads to 448 pairs
    assert 1.5 * num_weights <= num_bytes < 1.6 * num_weights

    before = dict(m._w12_weights)
    everything = m.engine(STOCK.replace(name="c", w12=ALL))
    assert set(m._w12_weights) == (
        {("target", n, "rows") for n in layers.linear_names(m.target)}
        | {("drafter", n, "rows") for n in layers.linear_names(m.drafter)})
    assert all(m._w12_weights[k] is w for k, w in before.items())  # nothing packed twice
    assert m.w12_nbytes() == sum(w.nbytes for w in m._w12_weights.values())
    assert everything.drafter is not m.drafter
    assert everything.target.get_submodule("lm_head").w12 is m._w12_weights[
        "target", "lm_head", "rows"]
    # the fragment order packs its own copies, and a view of its own
    frag = m.engine(STOCK.replace(name="d", w12=("target",), w12_order="frag"))
    assert frag.target is not view
    assert frag.target.get_submodule("lm_head").w12 is None
    assert frag.target.get_submodule(sorted(packed)[0]).w12.packed.order == "frag"


def test_ar_decode_with_w12_target_is_exact_on_cpu(bf16_models, prompts):
    bf16 = bf16_models.engine(AR)
    w12 = bf16_models.engine(AR.replace(name="ar_w12", w12=("target", "lm_head")))
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    for ids in prompts[:2]:
        ref = bf16.generate(ids, params)
        assert w12.generate(ids, params).tokens == ref.tokens
        full = ids + ref.tokens
        assert torch.equal(teacher_forced_logits(w12, full, len(full)),
                           teacher_forced_logits(bf16, full, len(full)))


@pytest.mark.parametrize("order", ["rows", "frag"])
def test_speculative_decode_with_every_group_packed_is_exact_on_cpu(bf16_models, prompts, order):
    bf16 = bf16_models.engine(STOCK)
    w12 = bf16_models.engine(STOCK.replace(name="stock_w12", w12=ALL, w12_order=order))
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    ref, out = bf16.generate(prompts[2], params), w12.generate(prompts[2], params)
    assert (out.tokens, out.accept_lengths) == (ref.tokens, ref.accept_lengths)


SETTING_TOML = """
name = "cpu_c1_tiny_bf16"
gpu = "cpu"
description = "The generated tiny pair in bfloat16 (W12 needs bf16 weights)."
tokenizer = "target"

[target]
source = "generated:tiny-qwen3_5"

[drafter]
source = "generated:tiny-dflash2"

[engine]
device = "cpu"
dtype = "bfloat16"
max_len = 512
"""


def test_validate_command_runs_a_w12_recipe(tmp_path, monkeypatch, capsys):
    """``specpilot validate SETTING --engine ar_w12``, the recipe in the setting's recipes/."""
    import specpilot.settings

    setting_dir = tmp_path / "cpu_c1_tiny_bf16"
    (setting_dir / "recipes").mkdir(parents=True)
    (setting_dir / "setting.toml").write_text(SETTING_TOML)
    (setting_dir / "recipes" / "ar_w12.json").write_text(json.dumps(
        {"name": "ar_w12", "speculative": False, "w12": ["lm_head"]}))
    monkeypatch.setattr(specpilot.settings, "SETTINGS_DIR", tmp_path)
    assert cli.main(["validate", "cpu_c1_tiny_bf16", "--engine", "ar_w12", "--num-prompts", "2",
                     "--max-new-tokens", "6", "--results-dir", str(tmp_path / "results")]) == 0
    assert "PASS cpu_c1_tiny_bf16 --engine ar_w12" in capsys.readouterr().out


# -- the prefill path ---------------------------------------------------------------------------

def test_prefill_path_decodes_row_blocks_exactly(monkeypatch):
    """More than 64 rows: the weight is decoded a row block at a time, escapes included."""
    monkeypatch.setattr(layers.W12Weight, "BLOCK_WEIGHTS", 40 * 67)
    w = synthetic_weight(150, 67, torch.device("cpu"), seed=3, outlier_rate=0.02)
    bias = torch.randn(150).to(torch.bfloat16)
    packed = layers.W12Weight(w)
    assert len(packed.blocks) == 4 and packed.packed.num_escapes > 0
    blocks = torch.cat([b.unpack() for b in packed.blocks])
    assert torch.equal(blocks.view(torch.int16), w.view(torch.int16))
    x = torch.randn(100, 67).to(torch.bfloat16)
    out = packed.linear(x, bias, max_rows=64)
    torch.testing.assert_close(out, F.linear(x, w, bias), rtol=0, atol=0)


# -- the W12 GEMM kernel inside the model (Triton interpreter) -----------------------------------

@pytest.fixture
def w12_kernel(monkeypatch, tmp_path):
    """Packed Linears on CPU run the W12 GEMM (interpreted), with an empty tuned-config cache."""
    from specpilot.kernels.common.interpret import interpreting

    if not interpreting():
        pytest.skip("needs TRITON_INTERPRET=1 (set by tests/conftest.py)")
    monkeypatch.setattr(layers, "use_w12_kernel", lambda x: True)
    monkeypatch.setenv("SPECPILOT_CACHE_DIR", str(tmp_path / "kernel-cache"))


@pytest.fixture(scope="module")
def small_models():
    target = random_model(SMALL_TARGET, "cpu", torch.bfloat16, seed=0)
    return Models(target, None, None, bf16_setting())


def ulps(scale: float, count: int) -> float:
    """``count`` bf16 ulps at magnitude ``scale`` (8 significant bits)."""
    return count * 2.0 ** (math.floor(math.log2(scale)) - 7)


def test_float32_weights_of_bf16_values_pack_and_run_in_float32(w12_kernel):
    """The float32 validation twin: a float32 weight holding bf16 values packs losslessly and its
    Linear runs the W12 GEMM on float32 activations; one holding other values cannot be W12."""
    w = synthetic_weight(45, 67, torch.device("cpu"), seed=2, outlier_rate=0.02).float()
    packed = layers.W12Weight(w)
    assert torch.equal(packed.packed.unpack().float(), w)
    for rows in (1, 5):
        x = torch.randn(rows, 67, generator=torch.Generator().manual_seed(rows))
        out = packed.linear(x, None, 64)
        assert out.dtype == torch.float32
        exact, abs_sum = gemm_exact(x, w)
        result = check_close("w12 float32 linear", out, exact, abs_sum)
        assert result.ok, str(result)
    with pytest.raises(ValueError, match="bf16 values only"):
        layers.W12Weight(w + 1e-4)


def test_linear_with_bias_through_w12_gemm(w12_kernel):
    w = synthetic_weight(45, 67, torch.device("cpu"), seed=1, outlier_rate=0.02)
    linear = layers.Linear(67, 45, bias=True).to(torch.bfloat16)
    with torch.no_grad():
        linear.weight.copy_(w)
    linear.w12 = layers.W12Weight(linear.weight)
    bias = linear.bias.detach().double()
    for rows in (1, 5):  # the gemv and the dot kernel
        x = torch.randn(1, rows, 67).to(torch.bfloat16)
        with torch.inference_mode():
            out = linear(x)
        assert out.shape == (1, rows, 45) and out.dtype == torch.bfloat16
        exact, abs_sum = gemm_exact(x[0], w)
        result = check_close("w12 linear + bias", out[0], exact + bias, abs_sum + bias.abs())
        assert result.ok, str(result)


@pytest.mark.parametrize("order", ["rows", "frag"])
def test_ar_logits_with_w12_gemm_match_bf16(w12_kernel, small_models, order):
    bf16 = small_models.engine(AR)
    w12 = small_models.engine(AR.replace(name="ar_w12", w12=("target", "lm_head"),
                                         w12_order=order))
    ids = torch.randint(1, 256, (9,), generator=torch.Generator().manual_seed(0)).tolist()
    # prefill: 6 rows (the dot kernel), then 3 decode steps (the gemv kernel)
    ref = teacher_forced_logits(bf16, ids, 6)
    out = teacher_forced_logits(w12, ids, 6)
    # each GEMM may round its fp32 sum to the neighbouring bf16 value; two layers keep the logits
    # within a few bf16 ulps of the largest one
    torch.testing.assert_close(out, ref, rtol=0, atol=ulps(ref.abs().max().item(), 4))


@pytest.mark.parametrize("order", ["rows", "frag"])
def test_ar_greedy_with_w12_gemm_passes_validation(w12_kernel, small_models, order):
    """Token forcing against the bf16 AR engine under the product rule (near-ties only, at most
    0.1% of tokens): on these few tokens that means the greedy tokens are equal. Both plane
    orders (``frag``: the GEMMs of kernels/w12f_gemm)."""
    bf16 = small_models.engine(AR)
    w12 = small_models.engine(AR.replace(name="ar_w12", w12=("target", "lm_head"),
                                         w12_order=order))
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (4, 11)]
    params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    scale = max(teacher_forced_logits(bf16, p, len(p)).abs().max().item() for p in prompts)
    # a flip needs the two logits' errors (each within 4 ulps) to cross the reference's gap
    report = validate_engine(bf16, w12, prompts, params, epsilon=ulps(scale, 8))
    assert report.passed, report.failures
    assert report.num_mismatches == 0
