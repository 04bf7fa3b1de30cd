"""Two-stage verification in the batched engine: lossless against greedy AR, a second stage only for
the requests whose first stage passed (with the linear layers on their rows alone), and replayed
counts equal to one verify of the window."""

import collections
import random

import pytest
import torch

from specpilot import tiny
from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import Running
from specpilot.engines.batch import run_requests
from specpilot.engines.drafters.replay import AcceptanceProfile
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models.layers import Linear
from specpilot.engines.models.layers import row_subset
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting


def _requests(prompts, lengths, stops=None):
    stops = stops or [()] * len(prompts)
    return [Running(str(i), list(p), SamplingParams(max_new_tokens=n, ignore_eos=True,
                                                    stop_token_ids=s), set(s))
            for i, (p, n, s) in enumerate(zip(prompts, lengths, stops))]


def _oracle_drafts(batch: BatchEngine, refs: dict[str, list[int]], seed: int):
    """Wrap the engine's drafter so each running row's first k drafts (k drawn per row and step)
    are its greedy AR continuation and the rest are wrong: the target's own greedy acceptance then
    accepts exactly k, so both stages run on real verdicts (the tiny drafter alone accepts ~none)."""
    rng = random.Random(seed)
    draft_fn = batch.engine._draft_fn

    def draft(cache, block_ids, positions, *args, **kwargs):
        drafts, q = draft_fn(cache, block_ids, positions, *args, **kwargs)
        drafts = drafts.clone()
        for i, req in enumerate(batch.running):
            ref = refs[req.request_id]
            start = int(positions[i, 0]) - len(req.prompt_ids) + 1  # d_1's index in ref
            good = rng.randint(0, drafts.shape[1])
            for j in range(drafts.shape[1]):
                token = ref[start + j] if start + j < len(ref) else 0
                drafts[i, j] = token if j < good else (token + 1) % tiny.VOCAB_SIZE
        return drafts, q

    batch.engine._draft_fn = draft


@pytest.mark.parametrize("pad", [True, False])
def test_two_stage_greedy_equals_greedy_ar(pad, monkeypatch, ragged):
    """Ragged requests (lengths, a stop token) on the tiny Muse pair: buckets of 2-3 rows verify an
    8-wide window as 3 + 5, of 4+ rows a 6-wide window as 2 + 4; every request gets its greedy AR
    tokens, the second stage runs only on rows that passed the first, and its linear layers see
    only those rows (padded to a bucket)."""
    lengths = [30, 7, 19, 24, 13]
    models, prompts, refs = ragged("cpu_c1_tiny-muse", lengths, 9, 3)
    stop = refs[3][10]  # request 3 stops at its first occurrence of this token
    stops = [(), (), (), (stop,), ()]
    expected = [r[:r.index(s[0]) + 1] if s else r for r, s in zip(refs, stops)]
    engine = models.engine(STOCK.replace(name="two-stage", two_stage=((2, 8, 3), (4, 6, 2))))
    batch = BatchEngine(engine, 5, pad_to_buckets=pad)
    _oracle_drafts(batch, {str(i): r for i, r in enumerate(refs)}, seed=1)
    seen = collections.Counter()
    verify_fn = engine._verify_fn
    lm_head = models.target.lm_head

    def verify(cache, draft_cache, verify_ids, positions):
        rows = lm_head.rows
        if rows is None:
            seen[("all rows", verify_ids.shape[1])] += 1
        else:  # the second stage: token rows of whole requests, fewer than the batch's
            assert rows.numel() % verify_ids.shape[1] == 0
            assert rows.numel() <= verify_ids.numel()
            seen[("passed rows", verify_ids.shape[1])] += 1
            seen["rows_left_out"] += verify_ids.numel() - rows.numel()
        return verify_fn(cache, draft_cache, verify_ids, positions)

    monkeypatch.setattr(engine, "_verify_fn", verify)
    requests = _requests(prompts, lengths, stops)
    run_requests(batch, requests)
    assert [r.tokens for r in requests] == expected
    assert seen[("all rows", 3)] and seen[("passed rows", 5)]
    assert seen[("all rows", 2)] and seen[("passed rows", 4)]
    assert seen["rows_left_out"] > 0  # some second stages skipped requests that failed
    assert lm_head.rows is None  # the row subset ends with the stage
    assert any(max(r.accept_lengths) > 3 for r in requests)  # past the first stage's prefix


def test_two_stage_replayed_counts_are_one_verify_of_the_window():
    """Replay: a row that drew 5 drafts keeps min(5, window - 1) of them plus the target's token,
    as one verify of the window would, whether or not it reaches the second stage; one that drew
    1 stops in the first stage."""
    models = load_models(load_setting("cpu_c1_tiny-muse"))
    prompts = [models.tokenizer.encode(t).ids[:12] for t in load_prompts("gsm8k", 4)]
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    refs = [models.engine(AR).generate(p, params).tokens for p in prompts]
    for drawn, window, first in ((5, 7, 6), (5, 5, 5), (1, 7, 2)):
        runs = {}
        for name, recipe in (("two", STOCK.replace(name="two", two_stage=((2, window, 3),))),
                             ("one", STOCK.replace(name="one", verify_widths=((2, window),)))):
            batch = BatchEngine(models.engine(recipe), 4, pad_to_buckets=True)
            requests = _requests(prompts, [20] * 4)
            for req, ref in zip(requests, refs):
                req.replay = ReplayPlan(ref, AcceptanceProfile.fixed(drawn, 16), tiny.VOCAB_SIZE)
            run_requests(batch, requests)
            assert [r.tokens for r in requests] == refs
            runs[name] = requests
        assert all(r.accept_lengths[0] == first for r in runs["two"]), (drawn, window)
        # the same steps as one verify of the window, and the target's own agreement counted alike
        for two, one in zip(runs["two"], runs["one"]):
            assert two.accept_lengths == one.accept_lengths
            assert two.replay.agreed == one.replay.agreed


def test_two_stage_is_refused_for_hybrid_targets_and_bad_tables():
    models = load_models(load_setting("cpu_c1_tiny"))
    engine = models.engine(STOCK.replace(name="two-stage", two_stage=((2, 8, 3),)))
    with pytest.raises(ValueError, match="attention-only targets"):
        BatchEngine(engine, 4)
    for bad in (((1, 8, 3),), ((4, 8, 8),), ((4, 8, 0),), ((4, 8, 3), (4, 6, 2)), ((4, 8),),
                (("a", 8, 3),)):
        with pytest.raises(SpecPilotError, match="two_stage must be"):
            STOCK.replace(two_stage=bad)
    with pytest.raises(SpecPilotError, match="needs a speculative chain recipe"):
        AR.replace(two_stage=((4, 8, 3),))
    recipe = STOCK.replace(two_stage=((4, 8, 3),), verify_widths=((2, 6),))
    assert recipe.stages_for(2, 16) == (6, None) and recipe.stages_for(4, 16) == (8, 3)
    assert recipe.stages_for(4, 4) == (4, 3) and recipe.stages_for(4, 3) == (3, None)


def test_row_subset_multiplies_only_the_listed_rows():
    torch.manual_seed(0)
    linear = Linear(6, 4, bias=True)
    x = torch.randn(2, 3, 6)
    full = linear(x)
    rows = torch.tensor([4, 1, 4])  # a repeated row (padding) gets its own result
    with row_subset([linear], rows):
        part = linear(x)
    assert linear.rows is None
    flat_full, flat_part = full.reshape(6, 4), part.reshape(6, 4)
    assert torch.equal(flat_part[[1, 4]], flat_full[[1, 4]])
    assert torch.equal(flat_part[[0, 2, 3, 5]], torch.zeros(4, 4))


def test_token_forcing_at_a_batch_setting_runs_the_two_stages():
    """The gate forces a two-stage recipe through the batched engine at the setting's bucket, so
    the stages it would run in a batch are the ones checked (replayed drafts are not involved)."""
    from specpilot.validation import validate_engine

    models = load_models(load_setting("cpu_c1_tiny-muse"))
    prompts = [models.tokenizer.encode(t).ids[:16] for t in load_prompts("gsm8k", 5)]
    engine = models.engine(STOCK.replace(name="two-stage", two_stage=((4, 8, 3),)))
    report = validate_engine(models.engine(AR), engine, prompts,
                             SamplingParams(max_new_tokens=20), concurrency=4)
    assert report.passed, report.failures
    assert report.concurrency == 4 and report.num_tokens == 5 * 20
