"""Muse-Glimmer target and its DFlash assistant against transformers 5.23 (tiny checkpoints, float32)."""

import pytest
import torch

from specpilot import tiny
from specpilot.engines.drafters.replay import AcceptanceProfile
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.recipe import AR
from specpilot.recipe import STOCK

transformers = pytest.importorskip("transformers")
from transformers.cache_utils import DFlashCache  # noqa: E402


def _rel_err(ours, ref):
    return float((ours - ref).abs().max() / ref.abs().max())


@pytest.fixture(scope="module")
def muse():
    path = tiny.tiny_muse_target()
    hf = transformers.MuseGlimmerForConditionalGeneration.from_pretrained(path,
                                                                          dtype=torch.float32).eval()
    return hf, load_model(path)


@pytest.fixture(scope="module")
def assistant():
    path = tiny.tiny_muse_assistant()
    hf = transformers.MuseGlimmerAssistantModel.from_pretrained(path, dtype=torch.float32).eval()
    return hf, load_model(path)


def test_logits_match_prefill_and_decode(muse):
    hf, ours = muse
    torch.manual_seed(0)
    ids = torch.randint(4, tiny.VOCAB_SIZE, (1, 37))  # longer than the window of 16
    cache = ours.new_cache(1, 512)
    out = ours.prefill(ids, torch.arange(37)[None], cache, last_only=False)
    with torch.no_grad():
        ref = hf(input_ids=ids, use_cache=True)
    assert _rel_err(out.logits, ref.logits) <= 1e-4
    past, length = ref.past_key_values, 37
    for step in range(10):
        nxt = ref.logits[:, -1].argmax(-1, keepdim=True)
        with torch.no_grad():
            ref = hf(input_ids=nxt, past_key_values=past, use_cache=True)
        past = ref.past_key_values
        out = ours(nxt, torch.tensor([[length]]), cache)
        length += 1
        assert _rel_err(out.logits, ref.logits) <= 1e-4, f"decode step {step}"


def test_sliding_kv_is_bounded_and_wraps(muse):
    """Sliding layers hold window + one prefill chunk; a 300-token sequence wraps the ring."""
    hf, ours = muse
    cache = ours.new_cache(1, 1024)
    windows = [kv.capacity for kv, layer in zip(cache.layers, ours.model.layers)
               if layer.self_attn.window is not None]
    assert windows and all(c == 16 + ours.max_rows_per_forward < 1024 for c in windows)
    torch.manual_seed(1)
    ids = torch.randint(4, tiny.VOCAB_SIZE, (1, 300))
    out = ours.prefill(ids[:, :290], torch.arange(290)[None], cache, last_only=False)
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
    assert _rel_err(out.logits, ref[:, :290]) <= 1e-4
    for t in range(290, 300):
        step = ours(ids[:, t:t + 1], torch.tensor([[t]]), cache)
        assert _rel_err(step.logits, ref[:, t:t + 1]) <= 1e-4


def test_greedy_tokens_equal_hf_generate(muse, tiny_models, tiny_prompts):
    hf, ours = muse
    engine = Engine(ours, None, AR, max_len=512)
    params = SamplingParams(max_new_tokens=64, ignore_eos=True)
    for prompt in tiny_prompts[:8]:  # 8 prompts, each longer than the sliding window
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=64, min_new_tokens=64,
                              do_sample=False, eos_token_id=None, pad_token_id=0)
        assert engine.generate(prompt, params).tokens == ref[0, len(prompt):].tolist()


def test_assistant_proposals_equal_transformers(muse, assistant, tiny_prompts):
    """Block proposals for the same prefix equal the HF assistant's (what DFlashTokenCandidateGenerator
    computes: target hidden states of the prefix as context, [anchor, MASK...] embedded without the
    target's embedding norm, argmax of the target lm_head on rows 1..B-1)."""
    hf_target, target = muse
    hf_assistant, drafter = assistant
    block = drafter.block_size
    for prompt in tiny_prompts[:4]:
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = hf_target(input_ids=ids, output_hidden_states=True)
        anchor = out.logits[0, -1].argmax()
        ctx = torch.cat([out.hidden_states[i + 1] for i in drafter.target_layer_ids], dim=-1)
        noise_ids = torch.tensor([[int(anchor)] + [tiny.MASK_ID] * (block - 1)])
        noise = torch.nn.functional.embedding(noise_ids, hf_target.get_input_embeddings().weight)
        positions = torch.arange(ids.shape[1] + block)[None]
        hf_cache = DFlashCache(config=hf_assistant.config)
        hf_cache.set_previous_accepted_tokens(ctx.shape[1])
        with torch.no_grad():
            hidden = hf_assistant(noise_embeds=noise, context_hidden_states=ctx,
                                  position_ids=positions, past_key_values=hf_cache,
                                  attention_mask=torch.ones_like(positions)).last_hidden_state
            hf_tokens = hf_target.lm_head(hidden[:, 1:]).argmax(-1)
        cache, draft_cache = target.new_cache(1, 256), drafter.new_cache(1, 256)
        res = target.prefill(ids, torch.arange(ids.shape[1])[None], cache,
                             capture=drafter.target_layer_ids)
        drafter.commit_context(res.aux, torch.arange(ids.shape[1])[None], draft_cache)
        block_pos = ids.shape[1] + torch.arange(block)[None]
        ours_hidden = drafter(target.draft_embed(noise_ids), block_pos, draft_cache)
        ours_tokens, _ = drafter.propose(ours_hidden, noise_ids[:, 0], target.lm_head)
        assert torch.equal(ours_tokens, hf_tokens)


def test_spec_parity_every_block_position(muse, assistant, tiny_prompts):
    _, target = muse
    _, drafter = assistant
    ar = Engine(target, None, AR, max_len=512)
    params = SamplingParams(max_new_tokens=34, ignore_eos=True)  # two full blocks + change
    prompt = tiny_prompts[0]
    ref = ar.generate(prompt, params).tokens
    stock = Engine(target, drafter, STOCK, max_len=512)  # no recurrent state: rollback is moot
    assert stock.block_size == 16
    for k in range(stock.block_size):
        plan = ReplayPlan(ref, AcceptanceProfile.fixed(k, 16), tiny.VOCAB_SIZE)
        assert stock.generate(prompt, params, replay=plan).tokens == ref, f"k={k}"
        assert plan.agreed[:-1] == plan.drawn[:-1]
    assert stock.generate(prompt, params).tokens == ref


def test_assistant_kv_is_windowed(assistant):
    _, drafter = assistant
    assert drafter.window() == 17  # transformers: distance <= sliding_window (16) is visible
    assert drafter.new_cache(1, 4096).layers[0].capacity == 17 + 2 * drafter.block_size


def test_assistant_on_the_hybrid_target(assistant, tiny_models, tiny_prompts):
    """The assistant architecture drafting for the tiny Qwen3.5 hybrid (both tiny targets): GDN state
    rollback at every block position of a 16-wide block."""
    _, drafter = assistant
    target = tiny_models.target
    params = SamplingParams(max_new_tokens=34, ignore_eos=True)
    ref = Engine(target, None, AR, max_len=512).generate(tiny_prompts[2], params).tokens
    stock = Engine(target, drafter, STOCK.replace(gdn_rollback="replay"), max_len=512)
    for k in range(stock.block_size):
        plan = ReplayPlan(ref, AcceptanceProfile.fixed(k, 16), tiny.VOCAB_SIZE)
        assert stock.generate(tiny_prompts[2], params, replay=plan).tokens == ref, f"k={k}"
