"""The confidence budget in the batched engine (``verify_budget='sps'``): each step's verify width
comes from the drafts' confidences and the steps/s table (the most expected tokens per second), and
the output is still every request's greedy AR continuation."""

import pytest
import torch

from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import Running
from specpilot.engines.batch import run_requests
from specpilot.engines.decode.budget import steps_per_second
from specpilot.engines.engine import SamplingParams
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

# Steps/s falling fast with verify tokens: the budget verifies few positions (a compute-bound
# forward); flat: every position is worth verifying (a weight-bound one).
STEEP = ((1, 100.0), (4, 60.0), (8, 30.0), (64, 4.0))
FLAT = ((1, 100.0), (256, 100.0))


@pytest.fixture
def budget_case(ragged):
    """``budget_case(setting, n)``: n ragged requests' models, prompts, lengths and AR tokens."""
    def make(setting: str, n: int):
        lengths = [20, 9, 16, 12, 18][:n]
        models, prompts, refs = ragged(setting, lengths, 8, 3)
        return models, prompts, lengths, refs

    return make


def _run(batch, prompts, lengths):
    requests = [Running(str(i), list(p), SamplingParams(max_new_tokens=k, ignore_eos=True), set())
                for i, (p, k) in enumerate(zip(prompts, lengths))]
    run_requests(batch, requests)
    return requests


def _oracle_drafts(batch: BatchEngine, refs: dict[str, list[int]], confidence: float):
    """Drafts equal to each row's greedy AR continuation, so the target accepts them all and only
    the budget's lengths cut the steps (the tiny drafter alone accepts ~none), each with this
    confidence (the drafter's own is ~1/vocab, whose survival vanishes after a few drafts)."""
    engine = batch.engine
    draft_fn = engine._draft_fn

    def draft(cache, block_ids, positions, *args, **kwargs):
        drafts, q = draft_fn(cache, block_ids, positions, *args, **kwargs)
        drafts = drafts.clone()
        for i, req in enumerate(batch.running):
            ref, start = refs[req.request_id], int(positions[i, 0]) - len(req.prompt_ids) + 1
            for j in range(drafts.shape[1]):
                drafts[i, j] = ref[start + j] if start + j < len(ref) else 0
        engine._confidence = torch.full(drafts.shape, confidence)
        return drafts, q

    engine._draft_fn = draft


@pytest.mark.parametrize("setting", ["cpu_c1_tiny-muse", "cpu_c1_tiny", "cpu_c1_tiny-muse-dspark"])
@pytest.mark.parametrize("pad", [True, False])
def test_budgeted_batch_equals_greedy_ar(setting, pad, budget_case):
    """Every drafter family (DFlash2 on Muse, DFlash on the hybrid Qwen3.5 pair, DSpark's
    confidence head): ragged requests decode to their greedy AR tokens under a steep table, which
    verifies narrower than the window."""
    models, prompts, lengths, refs = budget_case(setting, 4)
    engine = models.engine(STOCK.replace(name="budget", verify_budget="sps", sps_table=STEEP))
    batch = BatchEngine(engine, 4, pad_to_buckets=pad)
    requests = _run(batch, prompts, lengths)
    assert [r.tokens for r in requests] == refs
    window = engine.block_size
    assert batch.budget_steps and min(batch.budget_steps) < window
    assert set(batch.budget_steps) <= {w for b in batch.buckets for w in batch.budget_widths(b)}


def test_confident_drafts_widen_the_verify(budget_case):
    """Drafts the target accepts whole, confidence 0.9 each: a flat table verifies whole windows
    and a step keeps up to the block; a steep one verifies narrower, a step keeping at most its
    width. Both give the greedy tokens."""
    models, prompts, lengths, refs = budget_case("cpu_c1_tiny-muse", 3)
    block = models.engine(STOCK).block_size
    kept = {}
    for name, table in (("flat", FLAT), ("steep", STEEP)):
        engine = models.engine(STOCK.replace(name=name, verify_budget="sps", sps_table=table))
        batch = BatchEngine(engine, 3, pad_to_buckets=True)
        _oracle_drafts(batch, {str(i): r for i, r in enumerate(refs)}, 0.9)
        requests = _run(batch, prompts, lengths)
        assert [r.tokens for r in requests] == refs
        kept[name] = max(max(r.accept_lengths) for r in requests)
        assert kept[name] <= max(batch.budget_steps)
    assert kept["flat"] == block  # whole windows verified and accepted
    assert 1 < kept["steep"] < block


def _brute_force(conf, remaining, size, widths, table):
    best = None
    for w in widths:
        expected = 0.0
        for c, r in zip(conf, remaining):
            if r <= 0:
                continue
            surv, total = 1.0, 1.0
            for j in range(min(w - 1, r - 1)):
                surv *= c[j]
                total += surv
            expected += total
        score = expected * steps_per_second(table, size * w)
        if best is None or score > best[0] + 1e-9:
            best = (score, w)
    return best[1]


@pytest.mark.parametrize("seed", range(6))
def test_the_width_maximises_expected_tokens_per_second(seed):
    """Random confidences, remaining budgets (finished rows included) and tables: the chosen width
    is the brute-force argmax of (rows' 1 + survivals of the drafts they could keep) x SPS(bucket
    rows x width), the narrower on ties."""
    models = load_models(load_setting("cpu_c1_tiny-muse"))
    gen = torch.Generator().manual_seed(seed)
    decay = float(torch.rand((), generator=gen)) * 0.2
    table = ((1, 100.0), (16, 100.0 * (1 - 4 * decay)), (64, 100.0 * (1 - 4 * decay) / 3))
    engine = models.engine(STOCK.replace(name="b", verify_budget="sps", sps_table=table))
    batch = BatchEngine(engine, 4, pad_to_buckets=True)
    n, size = 3, 4
    window = batch._width(size)
    conf = torch.rand((n, window - 1), generator=gen) ** 0.3
    remaining = [int(v) for v in torch.randint(0, 20, (n,), generator=gen)]
    batch._conf[:n, :window - 1] = conf
    batch.rows.remaining[:n] = torch.tensor(remaining)
    chosen = batch._budget_width(n, size)
    assert chosen == _brute_force(conf.tolist(), remaining, size, batch.budget_widths(size), table)
    assert batch.budget_steps[chosen] == 1


def test_budget_is_refused_with_two_stage_and_sampled_drafts():
    models = load_models(load_setting("cpu_c1_tiny-muse"))
    budget = STOCK.replace(name="b", verify_budget="sps", sps_table=FLAT)
    with pytest.raises(ValueError, match="two_stage"):
        BatchEngine(models.engine(budget.replace(two_stage=((2, 8, 3),))), 2)
    with pytest.raises(ValueError, match="greedy drafts"):
        BatchEngine(models.engine(STOCK.replace(name="s", draft_sampling="sample")), 2)


def test_confidences_are_the_drafters(budget_case):
    """The draft part writes each row's confidence per draft: probabilities in [0, 1]."""
    models, prompts, lengths, _ = budget_case("cpu_c1_tiny-muse", 2)
    engine = models.engine(STOCK.replace(name="b", verify_budget="sps", sps_table=FLAT))
    batch = BatchEngine(engine, 2)
    for i, p in enumerate(prompts):
        params = SamplingParams(max_new_tokens=4, ignore_eos=True)
        batch.add(Running(str(i), list(p), params, set()))
    batch.step()
    conf = batch._conf[:2]
    assert torch.all((conf >= 0) & (conf <= 1)) and float(conf.sum()) > 0


def test_token_forcing_at_a_batch_setting_runs_the_budget():
    """The gate forces a budgeted recipe through the batched engine (the hybrid pair, whose drafter
    accepts some drafts), each step's width chosen by the budget."""
    from specpilot.validation import validate_engine

    models = load_models(load_setting("cpu_c1_tiny"))
    prompts = [models.tokenizer.encode(t).ids[:16] for t in load_prompts("gsm8k", 5)]
    engine = models.engine(STOCK.replace(name="b", verify_budget="sps", sps_table=STEEP))
    report = validate_engine(models.engine(AR), engine, prompts,
                             SamplingParams(max_new_tokens=20), concurrency=4)
    assert report.passed, report.failures
    assert report.concurrency == 4 and report.buckets and report.num_tokens == 5 * 20


def test_a_pinned_width_is_the_width_verified(budget_case):
    """``step(width=w)`` verifies w positions whatever the budget would choose: with drafts the
    target accepts whole, a steep table (which verifies narrow) pinned to the whole window keeps
    whole windows, and pinned to 2 keeps 2 per step; the tokens stay the greedy ones. A width the
    bucket has no graph for, or a pinned width without the budget, is refused."""
    models, prompts, lengths, refs = budget_case("cpu_c1_tiny-muse", 2)
    engine = models.engine(STOCK.replace(name="steep", verify_budget="sps", sps_table=STEEP))
    block = engine.block_size
    for width in (block, 2):
        batch = BatchEngine(engine, 2, pad_to_buckets=True)
        _oracle_drafts(batch, {str(i): r for i, r in enumerate(refs)}, 0.9)
        requests = [Running(str(i), list(p), SamplingParams(max_new_tokens=k, ignore_eos=True),
                            set()) for i, (p, k) in enumerate(zip(prompts, lengths))]
        batch.add_many(requests)
        while any(r.finish_reason is None for r in requests):
            batch.step(width=width)
        assert [r.tokens for r in requests] == refs
        for r in requests:  # every step but a request's last keeps the width
            assert r.accept_lengths[:-1] == [width] * (len(r.accept_lengths) - 1)
        assert max(n for r in requests for n in r.accept_lengths) == width
        assert not batch.budget_steps  # no width was the budget's
    with pytest.raises(ValueError, match="is not one"):
        batch.step(width=block + 1)
    static = BatchEngine(models.engine(STOCK), 2, pad_to_buckets=True)
    static.add(Running("0", list(prompts[0]), SamplingParams(max_new_tokens=4), set()))
    with pytest.raises(ValueError, match="verify_budget='sps'"):
        static.step(width=2)


def test_a_table_per_bucket_prices_each_bucket_by_its_own_points():
    """A (rows, tokens, steps/s) table: a bucket's widths are priced by the points measured at
    that bucket (else the nearest measured bucket above, else the largest below), so the same
    token count may cost differently at different rows; a (tokens, steps/s) table prices every
    bucket alike. Malformed tables are refused when the recipe is built."""
    from specpilot.engines.decode.budget import table_points
    from specpilot.errors import SpecPilotError

    table = ((2, 2, 400.0), (2, 4, 300.0), (4, 4, 380.0), (4, 8, 200.0))
    assert steps_per_second(table, 4, rows=2) == 300.0
    assert steps_per_second(table, 4, rows=4) == 380.0
    assert table_points(table, rows=1) == [(2, 400.0), (4, 300.0)]  # the nearest above
    assert table_points(table, rows=8) == [(4, 380.0), (8, 200.0)]  # the largest below
    assert steps_per_second(STEEP, 4, rows=2) == steps_per_second(STEEP, 4, rows=8) == 60.0
    for bad in (((1, 2, 3.0), (1, 2.0)), ((1, 0.0),), ((1, 2, 3, 4),)):
        with pytest.raises(SpecPilotError, match="sps_table needs"):
            STOCK.replace(name="b", verify_budget="sps", sps_table=bad)


def test_the_batched_budget_reads_its_buckets_points():
    """The same confidences and token counts choose differently when the bucket's own points say
    a wider verify is cheap there: the width follows the points measured at the step's bucket."""
    models = load_models(load_setting("cpu_c1_tiny-muse"))
    n, size = 3, 4
    per_bucket = {}
    for label, steep_at_4 in (("steep", True), ("flat", False)):
        points = [(4, 4 * w, 100.0 / w if steep_at_4 else 100.0) for w in (1, 2, 4, 8, 16)]
        points += [(2, 2 * w, 100.0) for w in (1, 2, 4, 8, 16)]  # another bucket: always flat
        engine = models.engine(STOCK.replace(name=label, verify_budget="sps", sps_table=points))
        batch = BatchEngine(engine, 4, pad_to_buckets=True)
        window = batch._width(size)
        batch._conf[:n, :window - 1] = 0.5
        batch.rows.remaining[:n] = 100
        per_bucket[label] = batch._budget_width(n, size)
    assert per_bucket["flat"] == batch._width(size)  # flat at this bucket: the whole window
    assert per_bucket["steep"] < per_bucket["flat"]
