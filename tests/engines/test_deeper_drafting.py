"""Deeper drafting (recipe ``draft_depth``): a second block drafted ahead of the first, as if the
first were accepted, and both verified in one forward. Greedy spec == greedy AR, token for token;
the trained tiny pair accepts into the second block, so the commit past one block is exercised."""

import pytest
import torch

from specpilot import tiny
from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.batch import BatchEngine
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe
from specpilot.settings import load_setting
from specpilot.validation import validate_engine

DEEP = STOCK.replace(name="deep", draft_depth=2)
PARAMS = SamplingParams(max_new_tokens=48, ignore_eos=True)


@pytest.fixture(scope="module")
def trained():
    models = load_models(load_setting("cpu_c1_tiny"))
    prompts = [models.tokenizer.encode(t).ids for t in load_prompts("gsm8k", 4)]
    return models, prompts


@pytest.mark.parametrize("rollback", ["snapshot", "replay"])
def test_deeper_drafting_equals_ar_and_accepts_past_one_block(trained, rollback, against_ar):
    models, prompts = trained
    stock = models.engine(STOCK.replace(gdn_rollback=rollback))
    deep = models.engine(DEEP.replace(gdn_rollback=rollback))
    block = models.drafter.block_size
    assert deep.block_size == deep.draft_window == 2 * block - 1
    results, tau = against_ar(models.engine(AR), {"stock": stock, "deep": deep}, prompts, PARAMS)
    longest = {name: max(n for out in outs for n in out.accept_lengths)
               for name, outs in results.items()}
    assert longest["stock"] <= block < longest["deep"]  # kept drafts of block two
    assert tau["deep"] >= tau["stock"], tau


def test_first_block_is_the_stock_draft_and_the_second_follows_it(trained):
    """Pass one is exactly the one-block draft; pass two's block is the anchor, pass one's drafts
    (as tokens) and its own masks."""
    models, prompts = trained
    stock, deep = models.engine(STOCK), models.engine(DEEP)
    block = stock.draft_block
    prompt = torch.tensor([prompts[0]])
    cache, draft_cache = stock._new_state(256)
    out = models.target.prefill(prompt, torch.arange(prompt.shape[1])[None], cache,
                                capture=stock.capture)
    models.drafter.commit_context(out.aux, torch.arange(prompt.shape[1])[None], draft_cache)
    anchor, start = torch.tensor([int(out.logits[0, -1].argmax())]), torch.tensor([prompt.shape[1]])
    one = stock._draft_fn(draft_cache, *stock._block(anchor, start))[0]
    ids, positions = deep._block(anchor, start)
    assert ids.shape[1] == 2 * block - 1
    two = deep._draft_fn(draft_cache, ids, positions)[0]
    assert two.shape == (1, 2 * (block - 1)) and torch.equal(two[:, :block - 1], one)
    seen = []
    forward = models.drafter.forward

    def recording(embeds, pos, cache_):
        seen.append(embeds.clone())
        return forward(embeds, pos, cache_)

    models.drafter.forward = recording
    try:
        deep._draft_fn(draft_cache, ids, positions)
    finally:
        del models.drafter.forward
    first_block_embeds = models.target.draft_embed(torch.cat([anchor[None], one], 1))
    assert len(seen) == 2 and seen[1].shape[1] == 2 * block - 1
    torch.testing.assert_close(seen[1][:, :block], first_block_embeds)


def test_deeper_drafting_on_muse_and_dflash(tiny_models, tiny_prompts):
    """Random drafters (acceptance near 1): the wider verify and commit stay exact on the
    attention-only Muse pair (sliding-window ring) and the hybrid target with DFlash."""
    muse = load_model(tiny.tiny_muse_target()), load_model(tiny.tiny_muse_assistant())
    dflash = tiny_models.target, load_model(tiny.tiny_drafter("tiny-dflash"))
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    for target, drafter in (muse, dflash):
        ar = Engine(target, None, AR, max_len=512)
        deep = Engine(target, drafter, DEEP.replace(draft_depth=3), max_len=512)
        if drafter.window() is not None:  # a ring: sized for the deep verify's rows
            ring = deep._new_state(512)[1].layers[0].capacity
            assert ring >= drafter.window() + 2 * deep.draft_window
        for prompt in tiny_prompts[:2]:
            assert deep.generate(prompt, params).tokens == ar.generate(prompt, params).tokens


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_a_ring_drafter_keeps_its_window_through_deep_verifies(depth):
    """An all-sliding-window drafter keeps its context as a ring; a deep verify commits
    depth * (B-1) + 1 rows of context, then the next step re-commits from its first unaccepted
    row. Every position of the window before the next draft must still be there."""
    drafter = load_model(tiny.tiny_muse_assistant())
    window, block = drafter.window(), drafter.block_size
    assert window is not None  # the Muse assistant: every layer windowed, so a ring
    rows = depth * (block - 1) + 1
    cache = drafter.new_cache(1, 4096, verify_rows=rows)
    kv = cache.layers[0]
    assert kv.capacity < 4096  # a ring
    generator = torch.Generator().manual_seed(0)
    committed = 0
    for _ in range(40):
        aux = torch.randn(1, rows, drafter.fc.in_features, generator=generator)
        drafter.commit_context(aux, committed + torch.arange(rows)[None], cache)
        committed += int(torch.randint(1, rows + 1, (), generator=generator))
        kv.truncate(torch.tensor([committed]))  # the engine's commit drops the unaccepted rows
        held = set(kv.pos[0][kv.pos[0] >= 0].tolist())
        assert set(range(max(0, committed - window), committed)) <= held


def test_token_forcing_passes_for_deeper_drafting(trained):
    models, prompts = trained
    report = validate_engine(models.engine(AR), models.engine(DEEP), prompts[:3],
                             SamplingParams(max_new_tokens=32), num_canaries=2, name="deep")
    assert report.passed, report.failures
    assert report.num_mismatches == 0 and report.tau > 1.5


def test_sampled_requests_run_deeper_drafting(trained):
    """At T > 0 the chain of both blocks goes through rejection sampling (greedy drafts are point
    masses; sampled drafts carry both passes' q): it runs to the token budget, and a seed
    reproduces its output."""
    models, prompts = trained
    params = SamplingParams(max_new_tokens=24, temperature=0.8, seed=3, ignore_eos=True)
    for sampling in ("greedy", "sample"):
        engine = models.engine(DEEP.replace(draft_sampling=sampling))
        first, again = (engine.generate(prompts[1], params) for _ in range(2))
        assert first.tokens == again.tokens and len(first.tokens) == 24


@pytest.mark.parametrize("changes", [
    {"draft_depth": 0}, {"draft_depth": 5}, {"draft_depth": True}, {"draft_depth": "2"},
    {"draft_depth": 2, "speculative": False}, {"draft_depth": 2, "block_size": 8},
    {"draft_depth": 2, "tree_branches": 2, "tree_positions": 1},
    {"draft_depth": 2, "verify_budget": "sps", "sps_table": [[2, 1.0]]},
    {"draft_depth": 2, "verify_widths": [[2, 4]]},
])
def test_bad_depth_recipes_raise(changes):
    with pytest.raises(SpecPilotError, match="draft_depth"):
        Recipe.from_dict({"name": "bad", **changes})


def test_refusals_and_hashes(tiny_models):
    dspark = load_model(tiny.tiny_drafter("tiny-dspark"))  # samples its first draft from the anchor
    assert dspark.query_rows(dspark.block_size) == dspark.block_size - 1
    with pytest.raises(SpecPilotError, match="deeper drafting"):
        Engine(tiny_models.target, dspark, DEEP, max_len=512)
    with pytest.raises(ValueError, match="deeper drafting is single-request"):
        BatchEngine(Engine(tiny_models.target, tiny_models.drafter, DEEP, max_len=512), 2)
    assert STOCK.replace(draft_depth=1).hash() == STOCK.hash() != DEEP.hash()
    assert Recipe.from_dict(DEEP.to_dict()) == DEEP
