"""Continuous batching changes no request's tokens: every output equals the request run alone."""

import threading

import pytest

from specpilot.engines.engine import SamplingParams
from specpilot.engines.scheduler import Scheduler
from specpilot.recipe import AR
from specpilot.recipe import STOCK


@pytest.mark.parametrize("recipe", [STOCK, AR, STOCK.replace(gdn_rollback="replay")],
                         ids=["stock-snapshot", "ar", "stock-replay"])
def test_batched_equals_alone(tiny_models, tiny_prompts, recipe):
    engine = tiny_models.engine(recipe)
    prompts = [p[:40 - 3 * i] for i, p in enumerate(tiny_prompts[:6])]  # ragged lengths
    lengths = [12, 30, 7, 25, 18, 30]  # requests leave at different steps
    alone = [engine.generate(p, SamplingParams(max_new_tokens=n)).tokens
             for p, n in zip(prompts, lengths)]
    scheduler = Scheduler(engine, max_batch=4)  # 6 requests, 4 rows: some wait in the queue
    got = {i: [] for i in range(len(prompts))}
    finished = threading.Semaphore(0)

    def collect(i):
        def on_event(event):
            got[i].extend(event.new_tokens)
            if event.finished:
                assert event.error is None
                finished.release()
        return on_event

    for i, (p, n) in enumerate(zip(prompts, lengths)):
        scheduler.submit(str(i), p, SamplingParams(max_new_tokens=n), collect(i))
    for _ in prompts:
        assert finished.acquire(timeout=120)
    scheduler.shutdown()
    assert [got[i] for i in range(len(prompts))] == alone


def test_too_long_request_is_refused_at_submit(tiny_models):
    scheduler = Scheduler(tiny_models.engine(AR), max_batch=1)
    with pytest.raises(ValueError, match="exceeds the context"):
        scheduler.submit("x", [5] * 10, SamplingParams(max_new_tokens=100000), lambda e: None)
    scheduler.shutdown()
