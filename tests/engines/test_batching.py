"""Continuous batching changes no request's tokens: every output equals the request run alone."""

import threading

import pytest

from specpilot.engines.engine import SamplingParams
from specpilot.engines.scheduler import Scheduler
from specpilot.recipe import AR
from specpilot.recipe import STOCK


@pytest.mark.parametrize("recipe", [STOCK, AR, STOCK.replace(gdn_rollback="replay")],
                         ids=["stock-snapshot", "ar", "stock-replay"])
def test_batched_equals_alone(tiny_models, tiny_prompts, recipe, serve_all):
    engine = tiny_models.engine(recipe)
    prompts = [p[:40 - 3 * i] for i, p in enumerate(tiny_prompts[:6])]  # ragged lengths
    lengths = [12, 30, 7, 25, 18, 30]  # requests leave at different steps
    alone = [engine.generate(p, SamplingParams(max_new_tokens=n)).tokens
             for p, n in zip(prompts, lengths)]
    # 6 requests, 4 rows: some wait in the queue
    got, _ = serve_all(engine, prompts, [SamplingParams(max_new_tokens=n) for n in lengths], 4)
    assert got == alone


def test_too_long_request_is_refused_at_submit(tiny_models):
    scheduler = Scheduler(tiny_models.engine(AR), max_batch=1)
    with pytest.raises(ValueError, match="exceeds the context"):
        scheduler.submit("x", [5] * 10, SamplingParams(max_new_tokens=100000), lambda e: None)
    scheduler.shutdown()


def test_batched_replay_keeps_tokens(tiny_models, tiny_prompts):
    """With replayed acceptance k per request, batched rows still produce the AR tokens."""
    from specpilot import tiny
    from specpilot.engines.drafters.replay import AcceptanceProfile
    from specpilot.engines.drafters.replay import ReplayPlan

    engine = tiny_models.engine(STOCK.replace(gdn_rollback="replay"))
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    refs = [tiny_models.engine(AR).generate(p, params).tokens for p in tiny_prompts[:3]]
    scheduler = Scheduler(engine, max_batch=3)
    got, plans = {i: [] for i in range(3)}, []
    finished = threading.Semaphore(0)

    def collect(i):
        def on_event(event):
            got[i].extend(event.new_tokens)
            if event.finished:
                finished.release()
        return on_event

    for i, (p, ref) in enumerate(zip(tiny_prompts[:3], refs)):
        plans.append(ReplayPlan(ref, AcceptanceProfile.fixed(2 + 2 * i, 8), tiny.VOCAB_SIZE))
        scheduler.submit(str(i), p, params, collect(i), replay=plans[-1])
    for _ in range(3):
        assert finished.acquire(timeout=120)
    scheduler.shutdown()
    assert [got[i] for i in range(3)] == refs
    for plan in plans:  # rows accepted different k in the same verify forward
        assert plan.agreed[:-1] == plan.drawn[:-1]
