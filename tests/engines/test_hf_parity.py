"""Our models against transformers 5.23 on tiny checkpoints of the real architectures (float32)."""

import pytest
import torch

from specpilot import tiny
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.recipe import AR

transformers = pytest.importorskip("transformers")


def _rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


@pytest.fixture(scope="module")
def hf_and_ours():
    path = tiny.tiny_target()
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return hf, load_model(path)


def test_tiny_target_has_both_layer_kinds_repeatedly(hf_and_ours):
    _, ours = hf_and_ours
    kinds = [layer.layer_type for layer in ours.model.layers]
    assert len(kinds) >= 8
    assert kinds.count("linear_attention") >= 2 and kinds.count("full_attention") >= 2


def test_logits_match_prefill_and_every_decode_step(hf_and_ours):
    hf, ours = hf_and_ours
    torch.manual_seed(0)
    ids = torch.randint(4, tiny.VOCAB_SIZE, (1, 23))
    cache = ours.new_cache(1, 128)
    out = ours(ids, torch.arange(23)[None], cache)
    with torch.no_grad():
        ref = hf(ids, use_cache=True)
    assert _rel_err(out.logits, ref.logits) <= 1e-4
    past, seq = ref.past_key_values, ids
    for step in range(12):
        next_id = ref.logits[:, -1].argmax(-1, keepdim=True)
        seq = torch.cat([seq, next_id], 1)
        with torch.no_grad():
            ref = hf(next_id, past_key_values=past, use_cache=True)
        past = ref.past_key_values
        out = ours(next_id, torch.tensor([[seq.shape[1] - 1]]), cache)
        assert _rel_err(out.logits, ref.logits) <= 1e-4, f"decode step {step}"


def test_greedy_tokens_equal_hf_generate(hf_and_ours, tiny_models, tiny_prompts):
    hf, _ = hf_and_ours
    engine = tiny_models.engine(AR)
    params = SamplingParams(max_new_tokens=64, ignore_eos=True)
    for prompt in tiny_prompts[:8]:  # 8 x 64 tokens: HF's torch Gated DeltaNet is the slow part
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=64, do_sample=False,
                              min_new_tokens=64, eos_token_id=None, pad_token_id=0)
        ours = engine.generate(prompt, params)
        assert ours.tokens == ref[0, len(prompt):].tolist()


def test_conditional_generation_checkpoint_loads_text_part(tmp_path):
    """A Qwen3_5ForConditionalGeneration directory (vision + text) loads into the text model."""
    cfg = transformers.Qwen3_5Config(
        text_config={**tiny.TARGET, "num_hidden_layers": 4},
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
                           out_hidden_size=tiny.TARGET["hidden_size"]))
    torch.manual_seed(1)
    hf = transformers.Qwen3_5ForConditionalGeneration(cfg).eval()
    hf.save_pretrained(tmp_path)
    ours = load_model(tmp_path)
    ids = torch.randint(4, tiny.VOCAB_SIZE, (1, 9))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
    out = ours(ids, torch.arange(9)[None], ours.new_cache(1, 32))
    assert type(ours).__name__ == "Qwen3_5ForConditionalGeneration"
    assert _rel_err(out.logits, ref) <= 1e-4


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-embeddings"])
def test_plain_qwen3_matches_hf(tmp_path, tied):
    cfg = transformers.Qwen3Config(hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                   vocab_size=512, max_position_embeddings=256,
                                   tie_word_embeddings=tied)
    torch.manual_seed(2)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    hf.save_pretrained(tmp_path)
    ours = load_model(tmp_path)
    assert (ours.lm_head.weight is ours.model.embed_tokens.weight) == tied
    ids = torch.randint(0, 512, (1, 17))
    with torch.no_grad():
        ref = hf.generate(ids, max_new_tokens=24, do_sample=False, min_new_tokens=24,
                          eos_token_id=None, pad_token_id=0)
        logits = hf(ids).logits
    out = ours(ids, torch.arange(17)[None], ours.new_cache(1, 64))
    assert _rel_err(out.logits, logits) <= 1e-4
    from specpilot.engines.engine import Engine

    gen = Engine(ours, None, AR, max_len=64).generate(ids[0].tolist(),
                                                      SamplingParams(max_new_tokens=24, ignore_eos=True))
    assert gen.tokens == ref[0, 17:].tolist()
