"""Batched prefill (recipe ``batched_prefill``): the requests that join at one step go through one
right-padded target forward; every request's tokens still equal its greedy AR tokens alone, and each
row's state equals a prefill of its prompt alone."""

import pytest
import torch

from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import Running
from specpilot.engines.batch import run_requests
from specpilot.engines.cache import GDNState
from specpilot.engines.cache import KVCache
from specpilot.engines.engine import SamplingParams
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

NUM_REQUESTS = 6


def _prompts(models, lengths):
    texts = load_prompts("gsm8k", len(lengths))
    ids = [models.tokenizer.encode(t).ids * 4 for t in texts]
    return [p[:n] for p, n in zip(ids, lengths)]


def _spy(batch, name):
    calls = []
    method = getattr(batch, name)

    def spied(*args, **kwargs):
        calls.append(args)
        return method(*args, **kwargs)

    setattr(batch, name, spied)
    return calls


@pytest.mark.parametrize("setting,rollback,recipe", [
    ("cpu_c1_tiny", "snapshot", STOCK), ("cpu_c1_tiny", "replay", STOCK), ("cpu_c1_tiny", "snapshot", AR),
    ("cpu_c1_tiny-muse", "snapshot", STOCK), ("cpu_c1_tiny-muse-dspark", "snapshot", STOCK)])
def test_batched_prefill_keeps_greedy_ar_tokens(setting, rollback, recipe):
    models = load_models(load_setting(setting))
    prompts = _prompts(models, [7 + 6 * i for i in range(NUM_REQUESTS)])  # ragged: 7 .. 37
    lengths = [20 - i for i in range(NUM_REQUESTS)]
    ar = models.engine(AR)
    alone = [ar.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True)).tokens
             for p, n in zip(prompts, lengths)]
    batch = BatchEngine(models.engine(recipe.replace(gdn_rollback=rollback, batched_prefill=True)),
                        4, pad_to_buckets=True)
    padded = _spy(batch, "_prefill_padded")
    requests = [Running(str(i), list(p), SamplingParams(max_new_tokens=n, ignore_eos=True), set())
                for i, (p, n) in enumerate(zip(prompts, lengths))]
    run_requests(batch, requests)
    assert [r.tokens for r in requests] == alone
    assert padded and len(padded[0][0]) == 4  # the first four joined in one forward


def test_padded_prefill_leaves_each_row_as_its_own_prefill():
    models = load_models(load_setting("cpu_c1_tiny"))
    target = models.target
    prompts = _prompts(models, [5, 19, 12])
    width = max(map(len, prompts))
    lengths = torch.tensor([len(p) for p in prompts])
    ids = torch.tensor([p + [p[-1]] * (width - len(p)) for p in prompts])
    cache = target.new_cache(3, 64, "snapshot")
    out = target(ids, torch.arange(width).expand(3, -1), cache.padded(lengths),
                 last_index=lengths - 1)
    cache.truncate(lengths)
    for row, prompt in enumerate(prompts):
        alone = target.new_cache(1, 64, "snapshot")
        ref = target.prefill(torch.tensor([prompt]), torch.arange(len(prompt))[None], alone)
        torch.testing.assert_close(out.logits[row, -1], ref.logits[0, -1], rtol=1e-4, atol=1e-4)
        for mine, theirs in zip(cache.layers, alone.layers):
            if isinstance(mine, GDNState):
                # inputs from a GEMM of another shape: equal up to its rounding
                torch.testing.assert_close(mine.conv[row], theirs.conv[0], rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(mine.recurrent[row], theirs.recurrent[0],
                                           rtol=1e-5, atol=1e-6)
            elif isinstance(mine, KVCache):
                assert torch.equal(mine.pos[row], theirs.pos[0])


def test_a_request_that_cannot_fit_fails_alone_and_the_others_join():
    models = load_models(load_setting("cpu_c1_tiny"))
    engine = models.engine(STOCK.replace(batched_prefill=True))
    batch = BatchEngine(engine, 4)
    prompts = _prompts(models, [9, 11, 13])
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    too_long = Running("big", [5] * 10, SamplingParams(max_new_tokens=engine.max_len), set())
    reqs = [Running(str(i), p, params, set()) for i, p in enumerate(prompts)]
    failed = batch.add_many([reqs[0], too_long, *reqs[1:]])
    assert [(r.request_id, "exceeds the context" in str(e)) for r, e in failed] == [("big", True)]
    assert batch.running == reqs and all(len(r.tokens) == 1 for r in reqs)


def test_a_width_past_a_ring_falls_back_to_one_prefill_each():
    """The drafter's windowed context is a ring: a padded width past its slots would overwrite
    real rows with padding, so those requests are prefilled one at a time (same tokens)."""
    models = load_models(load_setting("cpu_c1_tiny"))
    engine = models.engine(STOCK.replace(batched_prefill=True))
    batch = BatchEngine(engine, 2)
    slots = batch.draft_cache.min_capacity()
    prompts = _prompts(models, [slots + 5, 10])
    padded, one = _spy(batch, "_prefill_padded"), _spy(batch, "add")
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    reqs = [Running(str(i), p, params, set()) for i, p in enumerate(prompts)]
    run_requests(batch, reqs)
    ar = models.engine(AR)
    assert not padded and len(one) == 2
    assert [r.tokens for r in reqs] == [ar.generate(p, params).tokens for p in prompts]


def test_engine_names_add_catalog_mechanisms():
    from specpilot.engine_names import recipe_for
    from specpilot.errors import SpecPilotError

    setting = load_setting("cpu_c4_tiny")
    recipe = recipe_for(setting, "stock+batched-prefill")
    assert recipe.batched_prefill and recipe.name == "stock+batched-prefill"
    assert recipe.replace(name="stock", batched_prefill=False) == STOCK
    both = recipe_for(setting, "ar+batched-prefill+gdn-replay-rollback")
    assert both.batched_prefill and both.gdn_rollback == "replay" and not both.speculative
    # data only: a recipe without the field keeps its hash (campaign records stay comparable)
    assert STOCK.hash() == STOCK.replace(batched_prefill=False).hash() != recipe.hash()
    with pytest.raises(SpecPilotError, match="no mechanism 'warp-drive'"):
        recipe_for(setting, "stock+warp-drive")
    with pytest.raises(SpecPilotError, match="no mechanism 'canary-accept-all-drafts'"):
        recipe_for(setting, "stock+canary-accept-all-drafts")


def test_a_padded_forward_that_fails_falls_back_to_one_prefill_each(monkeypatch):
    """E.g. out of memory at the padded width: the same requests join one at a time."""
    models = load_models(load_setting("cpu_c1_tiny"))
    batch = BatchEngine(models.engine(STOCK.replace(batched_prefill=True)), 3)

    def no_room(reqs):
        raise torch.OutOfMemoryError("CUDA out of memory (injected)")

    monkeypatch.setattr(batch, "_prefill_padded", no_room)
    one = _spy(batch, "add")
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    reqs = [Running(str(i), p, params, set()) for i, p in enumerate(_prompts(models, [6, 9, 4]))]
    assert batch.add_many(reqs) == []
    assert len(one) == 3 and [r.request_id for r in batch.running] == ["0", "1", "2"]
