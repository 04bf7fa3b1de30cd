"""Overlapped scheduling (recipe ``overlap_schedule``): the host reads step k after step k+1 is
queued. Requests still decode to their greedy AR tokens with ragged prompts, lengths and stops,
while rows leave and join with a step in flight; replayed rows (benchmarks) replay on the device
exactly as one request does; steps that need the host mid-step run unoverlapped."""

import pytest

from specpilot import tiny
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import Running
from specpilot.engines.batch import run_requests
from specpilot.engines.drafters.replay import AcceptanceProfile
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import SamplingParams
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe

LENGTHS = [30, 27, 24, 1, 18, 15, 12, 9]


def _requests(prompts, refs, replay=False, block=8):
    """One request per prompt; every other one stops at the middle token of its reference."""
    stops = [(ref[len(ref) // 2],) if i % 2 else () for i, ref in enumerate(refs)]
    expected = [ref[:ref.index(s[0]) + 1] if s else ref for ref, s in zip(refs, stops)]
    reqs = [Running(str(i), list(p), SamplingParams(max_new_tokens=len(ref), ignore_eos=True,
                                                    stop_token_ids=s), set(s))
            for i, (p, ref, s) in enumerate(zip(prompts, refs, stops))]
    if replay:
        for i, (req, ref) in enumerate(zip(reqs, refs)):
            req.replay = ReplayPlan(ref, AcceptanceProfile.parametric(5.0, block),
                                    tiny.VOCAB_SIZE, seed=i)
    return reqs, expected


@pytest.mark.parametrize("setting", ["cpu_c1_tiny", "cpu_c1_tiny-muse"])
@pytest.mark.parametrize("base", [AR, STOCK.replace(batched_prefill=True)], ids=["ar", "stock"])
@pytest.mark.parametrize("pad", [False, True])
def test_overlapped_batch_equals_greedy_ar(ragged, setting, base, pad):
    """3 rows for 8 requests: every step but the first is queued while rows leave and join."""
    models, prompts, refs = ragged(setting, LENGTHS, 9, 5)
    batch = BatchEngine(models.engine(base.replace(overlap_schedule=True)), 3,
                        pad_to_buckets=pad)
    reqs, expected = _requests(prompts, refs)
    steps = run_requests(batch, reqs)
    assert [r.tokens for r in reqs] == expected
    assert batch.overlapped_steps == steps > 0 and batch._in_flight is None
    assert [r.finish_reason for r in reqs[:4]] == ["length", "stop", "length", "stop"]


def test_a_step_is_read_after_the_next_is_queued(ragged):
    models, prompts, refs = ragged("cpu_c1_tiny", [12, 12], 9, 5)
    batch = BatchEngine(models.engine(STOCK.replace(overlap_schedule=True)), 2)
    reqs, _ = _requests(prompts[:1], refs[:1])
    batch.add(reqs[0])
    assert batch.step() == [] and reqs[0].tokens == refs[0][:1]  # queued, not read yet
    first = batch.step()  # queues step 2, reads step 1
    assert [r for r, _ in first] == reqs and reqs[0].tokens == refs[0][:1 + len(first[0][1])]
    assert batch.transfers.num_fetches == 2
    last = batch.flush()  # reads step 2
    assert [r for r, _ in last] == reqs and reqs[0].tokens == refs[0][:len(reqs[0].tokens)]
    assert batch.flush() == [] and len(reqs[0].tokens) > 1 + len(first[0][1])


def test_steps_that_read_the_host_run_unoverlapped(ragged):
    """A sampled row (its acceptance draws from its generator on the host) is not overlapped, and
    a step queued before it joins is read first; the greedy rows keep their AR tokens."""
    models, prompts, refs = ragged("cpu_c1_tiny", LENGTHS[:4], 9, 5)
    batch = BatchEngine(models.engine(STOCK.replace(overlap_schedule=True)), 4)
    plain, expected = _requests(prompts[:2], refs[:2])
    sampled = Running("2", list(prompts[2]), SamplingParams(max_new_tokens=6, temperature=0.8,
                                                            seed=1, ignore_eos=True), set())
    batch.add_many(plain)
    batch.step()
    assert batch.overlapped_steps == 1 and batch._in_flight is not None
    batch.add_many([sampled])
    out = batch.step()  # the queued step is read, then this one runs and is read at once
    assert batch.overlapped_steps == 1 and batch._in_flight is None
    assert [r.request_id for r, _ in out] == ["0", "1", "0", "1", "2"]
    overlapped_when_left = {}

    def done(req):
        overlapped_when_left[req.request_id] = batch.overlapped_steps

    run_requests(batch, [], on_done=done)  # the rest, no new requests
    assert [r.tokens for r in plain] == expected and len(sampled.tokens) == 6
    # none while the sampled row ran; overlapped again once it had left
    assert overlapped_when_left["2"] == 1 and batch.overlapped_steps > 1


@pytest.mark.parametrize("overlap", [False, True])
def test_replayed_rows_replay_on_the_device_as_one_request_does(ragged, overlap):
    """Replayed acceptance in a batch (drafts and draws on the device, overlapped or not) keeps
    each request's AR tokens and steps exactly as the single-request engine replaying the same
    plan: the same draws, step by step, and the same accept lengths."""
    models, prompts, refs = ragged("cpu_c1_tiny", LENGTHS, 9, 5)
    block = models.drafter.block_size
    batch = BatchEngine(models.engine(STOCK.replace(overlap_schedule=overlap)), 3,
                        pad_to_buckets=True)
    reqs, expected = _requests(prompts, refs, replay=True, block=block)
    run_requests(batch, reqs)
    assert [r.tokens for r in reqs] == expected
    assert (batch.overlapped_steps > 0) == overlap
    engine = models.engine(STOCK)
    for req, ref in zip(reqs, refs):
        alone = ReplayPlan(ref, AcceptanceProfile.parametric(5.0, block), tiny.VOCAB_SIZE,
                           seed=int(req.request_id))
        out = engine.generate(list(req.prompt_ids), req.params, replay=alone)
        assert out.tokens == req.tokens
        assert req.accept_lengths == out.accept_lengths, req.request_id
        assert req.replay.drawn == alone.drawn and len(req.replay.agreed) == len(alone.agreed)


def test_a_row_a_replayed_request_left_serves_a_plain_one(ragged):
    """A replayed request with a long prompt leaves; a plain request with a short prompt takes its
    row while another replayed row still runs (the row keeps the old request's replay offsets)."""
    models, prompts, refs = ragged("cpu_c1_tiny", [3, 30, 20], 60, -25)
    batch = BatchEngine(models.engine(STOCK), 2)
    reqs, expected = _requests(prompts, refs, replay=True, block=models.drafter.block_size)
    reqs[2].replay = None
    assert len(reqs[0].prompt_ids) > len(reqs[2].prompt_ids) + 20
    run_requests(batch, reqs)
    assert [r.tokens for r in reqs] == expected


def test_a_request_removed_with_a_step_in_flight_gets_nothing_from_it(ragged):
    models, prompts, refs = ragged("cpu_c1_tiny", [20, 20], 9, 5)
    batch = BatchEngine(models.engine(STOCK.replace(overlap_schedule=True)), 2)
    reqs, _ = _requests(prompts, refs)
    batch.add_many(reqs)
    batch.step()
    batch.step()  # step 2 queued, step 1 read
    before = list(reqs[0].tokens)
    batch.remove(reqs[0])  # unfinished (a caller's cancel), with step 2 in flight
    assert [r for r, _ in batch.flush()] == [reqs[1]] and reqs[0].tokens == before
    assert reqs[1].tokens == refs[1][:len(reqs[1].tokens)]


def test_a_failed_step_leaves_nothing_in_flight(ragged, monkeypatch):
    models, prompts, refs = ragged("cpu_c1_tiny", [20], 9, 5)
    batch = BatchEngine(models.engine(STOCK.replace(overlap_schedule=True)), 2)
    reqs, _ = _requests(prompts, refs)
    batch.add_many(reqs)
    batch.step()
    assert batch._in_flight is not None

    def broken(size, graphs, width=None):
        raise RuntimeError("device lost")

    monkeypatch.setattr(batch, "_queue", broken)
    with pytest.raises(RuntimeError, match="device lost"):
        batch.step()
    assert batch._in_flight is None and batch.flush() == []


def test_overlap_through_the_scheduler(tiny_models, tiny_prompts, serve_all, monkeypatch):
    built = []
    init = BatchEngine.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(BatchEngine, "__init__", recording)
    engine = tiny_models.engine(STOCK.replace(overlap_schedule=True))
    prompts = [p[:40 - 3 * i] for i, p in enumerate(tiny_prompts[:6])]
    lengths = [12, 30, 7, 25, 18, 30]
    alone = [engine.generate(p, SamplingParams(max_new_tokens=n)).tokens
             for p, n in zip(prompts, lengths)]
    got, stats = serve_all(engine, prompts, [SamplingParams(max_new_tokens=n) for n in lengths],
                           4)
    assert got == alone
    assert len(built) == 1 and 0 < built[0].overlapped_steps == stats.steps_total


def test_a_step_in_flight_at_an_admission_is_decode_time(tiny_models, tiny_prompts, serve_all,
                                                         monkeypatch):
    """A request joins while an overlapped step still runs: the scheduler waits for that step
    before it starts the admission's clock and counts the wait as decode-step time (the prefill
    would otherwise wait for it inside the admission). The wait stands in for the device here."""
    import time

    waits = []
    real = BatchEngine.wait_in_flight

    def slow(self):
        if not real(self):
            return False
        time.sleep(0.2)
        waits.append(self._in_flight is not None)  # waited, not read
        return True

    monkeypatch.setattr(BatchEngine, "wait_in_flight", slow)
    engine = tiny_models.engine(STOCK.replace(overlap_schedule=True))
    prompts = [p[:30] for p in tiny_prompts[:6]]
    params = [SamplingParams(max_new_tokens=n) for n in (6, 20, 9, 20, 12, 20)]
    alone = [engine.generate(p, q).tokens for p, q in zip(prompts, params)]
    got, stats = serve_all(engine, prompts, params, 2)
    assert got == alone
    assert waits and all(waits)  # requests joined with a step in flight
    assert stats.step_seconds_total >= 0.2 * len(waits)
    assert stats.admission_seconds_total < 0.2 * len(waits)  # the waits are not in it


def test_wait_in_flight_waits_without_reading(ragged):
    models, prompts, refs = ragged("cpu_c1_tiny", [20], 9, 5)
    batch = BatchEngine(models.engine(STOCK.replace(overlap_schedule=True)), 2)
    reqs, _ = _requests(prompts, refs)
    batch.add_many(reqs)
    assert not batch.wait_in_flight()
    batch.step()
    before = list(reqs[0].tokens)
    assert batch.wait_in_flight() and reqs[0].tokens == before  # nothing read
    assert batch.flush() and len(reqs[0].tokens) > len(before)
    assert not batch.wait_in_flight()


@pytest.mark.parametrize("changes", [
    {"overlap_schedule": "yes"}, {"overlap_schedule": 1},
    {"overlap_schedule": True, "verify_budget": "sps", "sps_table": [[2, 1.0]]},
    {"overlap_schedule": True, "two_stage": [[4, 8, 3]]},
])
def test_overlap_recipe_field(changes):
    with pytest.raises(SpecPilotError, match="overlap_schedule"):
        Recipe.from_dict({"name": "bad", **changes})


def test_overlap_recipe_hash():
    assert STOCK.replace(overlap_schedule=False).hash() == STOCK.hash()
    assert STOCK.replace(overlap_schedule=True).hash() != STOCK.hash()
