"""The batched step: lossless against greedy AR with ragged rows, and a host read count that does not
grow with the batch (one device->host copy per step, whatever the number of running requests)."""

import collections
import sys

import pytest
import torch

from specpilot import tiny
from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import Running
from specpilot.engines.batch import run_requests
from specpilot.engines.batch_rows import RowState
from specpilot.engines.drafters.replay import AcceptanceProfile
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import SamplingParams
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

NUM_REQUESTS = 8
# what reads a tensor's values on the host (on CUDA: a device->host copy and a wait)
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__")


def _requests(prompts, lengths, temperatures=None, stops=None):
    temperatures = temperatures or [0.0] * len(prompts)
    stops = stops or [()] * len(prompts)
    return [Running(str(i), list(p), SamplingParams(max_new_tokens=n, ignore_eos=True,
                                                    temperature=t, seed=i, stop_token_ids=s),
                    set(s))
            for i, (p, n, t, s) in enumerate(zip(prompts, lengths, temperatures, stops))]


def _until_stop(tokens: list[int], stops: tuple[int, ...]) -> list[int]:
    """What a request with these stop ids emits: through the first stop token."""
    for i, token in enumerate(tokens):
        if token in stops:
            return tokens[:i + 1]
    return tokens


def _run(batch: BatchEngine, requests: list[Running]) -> list[list[int]]:
    """All requests at once (the batch has a row for each); steps until every one has finished."""
    run_requests(batch, requests)
    return [r.tokens for r in requests]


@pytest.mark.parametrize("setting,pad,rollback", [
    ("cpu_c1_tiny", False, "snapshot"), ("cpu_c1_tiny-muse", False, "snapshot"),
    ("cpu_c1_tiny-muse-dspark", True, "snapshot"),
    ("cpu_c1_tiny", True, "snapshot"), ("cpu_c1_tiny", True, "replay")])
def test_batched_greedy_spec_equals_greedy_ar(setting, pad, rollback):
    """8 concurrent greedy requests with ragged prompts, lengths and stops: batched spec tokens ==
    each request's greedy AR tokens alone."""
    models = load_models(load_setting(setting))
    texts = load_prompts("gsm8k", NUM_REQUESTS)
    prompts = [models.tokenizer.encode(t).ids[:9 + 5 * i] for i, t in enumerate(texts)]
    lengths = [30 - 2 * i for i in range(NUM_REQUESTS)]  # rows leave at different steps
    lengths[3] = 1  # done at prefill
    ar = models.engine(AR)
    alone = [ar.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True)).tokens
             for p, n in zip(prompts, lengths)]
    # odd requests stop at a token of their own continuation (mid-block, usually)
    stops = [(ref[len(ref) // 2],) if i % 2 else () for i, ref in enumerate(alone)]
    expected = [_until_stop(ref, s) for ref, s in zip(alone, stops)]
    requests = _requests(prompts, lengths, stops=stops)
    # pad: every step runs on its CUDA-graph bucket's rows (7 -> 8, 5 -> 8, 3 -> 4 ..): the
    # inert padding rows change nobody's tokens
    batch = BatchEngine(models.engine(STOCK.replace(gdn_rollback=rollback)), NUM_REQUESTS,
                        pad_to_buckets=pad)
    assert _run(batch, requests) == expected
    assert [r.finish_reason for r in requests] == [
        "stop" if s and ref[-1] in s else "length" for ref, s in zip(expected, stops)]
    if setting == "cpu_c1_tiny":  # the trained pair: rows really kept several tokens per step
        assert max(n for r in requests for n in r.accept_lengths) > 2


def test_row_state_keeps_through_the_first_stop_within_budget():
    """The on-device clip is ``Engine._clip``: budget first, then through the first stop."""
    rows = RowState(6, "cpu")
    rows.set_row(0, pending=1, committed=10, remaining=5, stops={7})  # stops mid-proposal
    rows.set_row(1, 1, 10, 2, {7})  # the budget ends before the stop
    rows.set_row(2, 1, 10, 5, {7, 9})  # the first token stops (stop ids grow to 2 per row)
    rows.set_row(3, 1, 10, 0, set())  # finished: keeps nothing
    rows.set_row(4, 1, 10, 9, {7})  # keeps all it proposed (the 7 is past them)
    proposed = torch.tensor([[3, 7, 4, 5], [3, 4, 7, 5], [9, 7, 4, 5], [3, 4, 5, 6], [3, 4, 5, 7]])
    kept = rows.keep(proposed, torch.tensor([4, 4, 3, 4, 3]))
    assert kept.tolist() == [2, 2, 1, 0, 3]
    assert rows.pending[:5].tolist() == [7, 4, 9, 1, 5]
    assert rows.committed[:5].tolist() == [12, 12, 11, 10, 13]
    assert rows.remaining[:5].tolist() == [0, 0, 0, 0, 6]


class HostReads:
    """Counts host reads of tensor values (and host->device tensor builds) made while active;
    a replay plan's own CPU generator draws (benchmark-only, host memory) are not reads."""

    def __init__(self, monkeypatch):
        self.counts, self.active = collections.Counter(), False
        for name in HOST_READS:
            self._wrap(monkeypatch, torch.Tensor, name, name)
        self._wrap(monkeypatch, torch, "tensor", "tensor()")

    def _wrap(self, monkeypatch, owner, name, key):
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            caller = sys._getframe(1).f_code.co_filename
            if self.active and not caller.endswith("replay.py"):
                self.counts[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    def per_step(self, batch: BatchEngine, num_steps: int) -> dict:
        self.counts.clear()
        self.active = True
        try:
            for _ in range(num_steps):
                batch.step()
        finally:
            self.active = False
        return {k: v / num_steps for k, v in self.counts.items()}


@pytest.mark.parametrize("case", ["ar", "greedy", "mixed"])
def test_host_reads_per_step_do_not_grow_with_batch(tiny_models, tiny_prompts, monkeypatch, case):
    """One device->host read per step at batch 1 and at batch 8, replayed rows included (their
    drafts are built on the device from the draws taken at admission)."""
    recipe = AR if case == "ar" else STOCK
    reads = HostReads(monkeypatch)
    measured = {}
    for size in (1, NUM_REQUESTS):
        engine = tiny_models.engine(recipe)
        batch = BatchEngine(engine, size)
        temperatures = [0.8 if case == "mixed" and i % 2 else 0.0 for i in range(size)]
        for i, req in enumerate(_requests(tiny_prompts[:size], [100] * size, temperatures)):
            if case == "mixed" and i % 4 == 0:  # replayed acceptance (benchmarks) in the batch
                req.replay = ReplayPlan(list(range(200)), AcceptanceProfile.parametric(
                    3.0, engine.block_size), tiny.VOCAB_SIZE, seed=i)
            batch.add(req)
        batch.step()  # warm-up
        fetches = batch.transfers.num_fetches
        measured[size] = reads.per_step(batch, 3)
        assert batch.transfers.num_fetches - fetches == 3
    assert measured[1] == measured[NUM_REQUESTS], measured
    assert measured[NUM_REQUESTS] == {"tolist": 1}


def test_padded_buckets_with_replayed_rows_keep_tokens_and_draws():
    """Replayed rows (benchmarks) in a padded bucket: forced acceptance is per row, vectorised, and
    the tokens are still each request's AR tokens."""
    models = load_models(load_setting("cpu_c1_tiny"))
    texts = load_prompts("gsm8k", 3)
    prompts = [models.tokenizer.encode(t).ids[:12] for t in texts]
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    refs = [models.engine(AR).generate(p, params).tokens for p in prompts]
    batch = BatchEngine(models.engine(STOCK), 4, pad_to_buckets=True)
    requests = _requests(prompts, [20] * 3)
    for i, (req, ref) in enumerate(zip(requests, refs)):
        req.replay = ReplayPlan(ref, AcceptanceProfile.fixed(1 + 2 * i, 8), tiny.VOCAB_SIZE)
    assert batch.buckets == [1, 2, 4]
    assert _run(batch, requests) == refs
    for req in requests:  # every full step kept the drawn count + the bonus
        drawn = req.replay.drawn
        assert req.accept_lengths[:-1] == [k + 1 for k in drawn[:len(req.accept_lengths) - 1]]


class _EagerReplay:
    """Stands in for ``CapturedStep`` on a CPU box: runs the step as often as capture does (the
    warm-up runs and the captured one) and then once per "replay". What it checks is the batched
    engine's graph bookkeeping -- capture on an empty batch disturbs nothing, parts read and write
    only persistent buffers, the forced-acceptance buffer is reset -- not CUDA itself."""

    def __init__(self, fn, inputs, pool=None, warmup: int = 3):
        assert inputs == {}  # a batched part reads persistent buffers only
        for _ in range(warmup + 1):
            self.outputs = fn()
        self.fn = fn

    def __call__(self):
        return self.fn()


def test_graph_bookkeeping_keeps_tokens(monkeypatch):
    """The captured path (two parts per bucket, replayed rows between them, then plain rows again)
    gives every request its AR tokens."""
    from specpilot.engines import graphs

    monkeypatch.setattr(graphs, "CapturedStep", _EagerReplay)
    models = load_models(load_setting("cpu_c1_tiny"))
    texts = load_prompts("gsm8k", 3)
    prompts = [models.tokenizer.encode(t).ids[:10 + 3 * i] for i, t in enumerate(texts)]
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    refs = [models.engine(AR).generate(p, params).tokens for p in prompts]
    engine = models.engine(STOCK)
    monkeypatch.setattr(engine, "use_graphs", True)
    batch = BatchEngine(engine, 4)
    assert batch.pad and sorted(batch._graphs) == [1, 2, 4]
    replayed = _requests(prompts, [16] * 3)
    replayed[1].replay = ReplayPlan(refs[1], AcceptanceProfile.fixed(3, 8), tiny.VOCAB_SIZE)
    assert _run(batch, replayed) == refs
    assert _run(batch, _requests(prompts, [16] * 3)) == refs  # the forced counts were cleared


def test_a_batch_that_does_not_fit_fails_at_construction_with_what_to_change(monkeypatch):
    """Out of device memory while allocating the rows or capturing the buckets: a clear error that
    names the rows, the snapshot states they keep and the switch that keeps less."""
    from specpilot.engines import batch as batch_module
    from specpilot.errors import SpecPilotError

    models = load_models(load_setting("cpu_c1_tiny"))

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 768.00 MiB.")

    monkeypatch.setattr(batch_module, "RowState", no_memory)
    with pytest.raises(SpecPilotError, match=r"a batch of 32 rows .* does not fit") as err:
        BatchEngine(models.engine(STOCK), 32)
    assert "keeps 8 recurrent states per row" in str(err.value)  # one per verified row
    assert "gdn_rollback='replay'" in str(err.value) and "768.00 MiB" in str(err.value)
    with pytest.raises(SpecPilotError) as err:
        BatchEngine(models.engine(STOCK.replace(gdn_rollback="replay")), 32)
    assert "gdn_rollback='replay' keeps" not in str(err.value)


def test_verifies_of_every_batch_size_keep_their_snapshots_in_one_reserved_buffer():
    """Snapshot rollback: a verify of any bucket's rows writes its per-row states into the cache's
    reserved buffer (so the CUDA graphs of all buckets share one), and commit reads them from there."""
    from specpilot.engines.cache import GDNState

    models = load_models(load_setting("cpu_c1_tiny"))
    target = models.target
    cache = target.new_cache(4, 64, "snapshot").reserve_snapshots(8)
    gdn = [i for i, layer in enumerate(cache.layers) if isinstance(layer, GDNState)]
    assert gdn and cache.layers[gdn[0]].snapshots.shape[:2] == (4, 8)
    for rows in (1, 2, 4):
        view = cache.rows(slice(0, rows))
        ids = torch.randint(5, 100, (rows, 8))
        positions = torch.arange(8)[None].expand(rows, 8)
        target(ids, positions, view, commit_all=False)
        for i in gdn:
            steps = view.layers[i].pending.steps
            assert steps.shape[:2] == (rows, 8)
            assert steps.data_ptr() == cache.layers[i].snapshots.data_ptr()
        view.commit(torch.full((rows,), 3), torch.full((rows,), 3))
        for i in gdn:  # the kept state is the snapshot after the third row
            assert torch.equal(cache.layers[i].recurrent[:rows],
                               cache.layers[i].snapshots[:rows, 2])
    odd = cache.rows(slice(0, 2))  # a width other than the reserved one allocates its own
    target(torch.randint(5, 100, (2, 5)), torch.arange(5)[None].expand(2, 5), odd,
           commit_all=False)
    assert odd.layers[gdn[0]].pending.steps.data_ptr() != cache.layers[gdn[0]].snapshots.data_ptr()


def test_generate_all_runs_more_prompts_than_rows_and_keeps_their_order():
    from specpilot.engines.batch import generate_all

    models = load_models(load_setting("cpu_c1_tiny"))
    prompts = [models.tokenizer.encode(t).ids[:10 + 3 * i]
               for i, t in enumerate(load_prompts("gsm8k", 5))]
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    ar = models.engine(AR)
    done = []
    got = generate_all(BatchEngine(models.engine(STOCK), 2), prompts, params, done.append)
    assert got == [ar.generate(p, params).tokens for p in prompts]
    assert sorted(done) == list(range(5))


def test_batch_engines_sharing_scratch_stay_lossless_when_interleaved():
    """Two batched engines (per-token and fused snapshot kernels) that share one snapshot scratch
    buffer, stepping in turn as an interleaved A/B does: each request still equals greedy AR."""
    models = load_models(load_setting("cpu_c1_tiny"))
    texts = load_prompts("gsm8k", 4)
    prompts = [models.tokenizer.encode(t).ids[:9 + 4 * i] for i, t in enumerate(texts)]
    lengths = [20, 14, 9, 17]
    ar = models.engine(AR)
    expected = [ar.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True)).tokens
                for p, n in zip(prompts, lengths)]
    a = BatchEngine(models.engine(STOCK), 4)
    b = BatchEngine(models.engine(STOCK.replace(gdn_snapshot="fused")), 4, share_scratch=a)
    assert b.cache.snapshots is a.cache.snapshots and b.cache.windows is a.cache.windows
    runs = {side: _requests(prompts, lengths) for side in "ab"}
    for side, batch in (("a", a), ("b", b)):
        for req in runs[side]:
            batch.add(req)
    while any(batch.running for batch in (a, b)):  # one step of each in turn
        for batch in (a, b):
            for req in [r for r in batch.running if r.finish_reason is not None]:
                batch.remove(req)
            if any(r.finish_reason is None for r in batch.running):
                batch.step()
    assert [r.tokens for r in runs["a"]] == expected
    assert [r.tokens for r in runs["b"]] == expected


@pytest.mark.parametrize("setting", ["cpu_c1_tiny", "cpu_c1_tiny-muse"])
def test_verify_widths_by_occupancy_stay_lossless(setting, monkeypatch, ragged):
    """``verify_widths``: a bucket of 4+ rows drafts and verifies 2 positions per request, 2-3 rows
    verify 4, one row the whole block; as ragged requests leave, the steps cross all three, and
    every request still gets its greedy AR tokens."""
    lengths = [26, 6, 12, 18, 22]
    models, prompts, expected = ragged(setting, lengths, 10, 4)
    engine = models.engine(STOCK.replace(name="widths", verify_widths=((2, 4), (4, 2))))
    batch = BatchEngine(engine, 4, pad_to_buckets=True)
    widths = collections.Counter()
    verify = engine._verify_fn

    def counting(cache, draft, verify_ids, positions):
        widths[verify_ids.shape[1]] += 1
        return verify(cache, draft, verify_ids, positions)

    monkeypatch.setattr(engine, "_verify_fn", counting)
    requests = _requests(prompts, lengths)
    assert _run(batch, requests) == expected
    assert set(widths) == {2, 4, engine.block_size}


def test_verify_widths_cut_a_replayed_count_at_the_step_width():
    """Replay at a narrower width is the drafter's profile truncated: a row that drew 5 drafts
    keeps only width - 1 of them (then the target's token), never more than the step verified."""
    models = load_models(load_setting("cpu_c1_tiny"))
    texts = load_prompts("gsm8k", 4)
    prompts = [models.tokenizer.encode(t).ids[:12] for t in texts]
    params = SamplingParams(max_new_tokens=16, ignore_eos=True)
    refs = [models.engine(AR).generate(p, params).tokens for p in prompts]
    engine = models.engine(STOCK.replace(name="widths", verify_widths=((4, 3),)))
    batch = BatchEngine(engine, 4, pad_to_buckets=True)
    requests = _requests(prompts, [16] * 4)
    for req, ref in zip(requests, refs):
        req.replay = ReplayPlan(ref, AcceptanceProfile.fixed(5, 8), tiny.VOCAB_SIZE)
    assert _run(batch, requests) == refs
    for req in requests:  # four rows share the 4-bucket (width 3) until the first ones finish
        assert req.accept_lengths[0] == 3


@pytest.mark.parametrize("widths", [((1, 4),), ((4, 1),), ((4, 8), (4, 6)), ((8, 4), (4, 2)),
                                    (("a", 2),), ((4, True),)])
def test_bad_verify_widths_are_clear_errors(widths):
    with pytest.raises(SpecPilotError, match="verify_widths must be"):
        STOCK.replace(verify_widths=widths)
    with pytest.raises(SpecPilotError, match="needs a speculative chain recipe"):
        AR.replace(verify_widths=((4, 2),))


def test_a_narrower_verify_drafts_the_drafters_whole_block():
    """A parallel drafter attends across its block, so drafting a narrower window would change
    even its first drafts: engines always draft the drafter's own block and verify its first
    positions (one request with a 4-wide block_size, and a batch whose buckets verify 2)."""
    models = load_models(load_setting("cpu_c1_tiny"))
    prompts = [models.tokenizer.encode(t).ids[:12] for t in load_prompts("gsm8k", 3)]
    params = SamplingParams(max_new_tokens=10, ignore_eos=True)
    native = models.drafter.block_size
    for engine, run in (
            (models.engine(STOCK.replace(name="b4", block_size=4)),
             lambda e: [e.generate(p, params).tokens for p in prompts]),
            (models.engine(STOCK.replace(name="w2", verify_widths=((2, 2),))),
             lambda e: _run(BatchEngine(e, 4, pad_to_buckets=True),
                            _requests(prompts, [10] * 3)))):
        widths = collections.defaultdict(set)
        draft_fn, verify_fn = engine._draft_fn, engine._verify_fn

        def draft(cache, block_ids, positions, *args, _f=draft_fn, _w=widths, **kwargs):
            _w["draft"].add(block_ids.shape[1])
            return _f(cache, block_ids, positions, *args, **kwargs)

        def verify(cache, draft_cache, verify_ids, positions, _f=verify_fn, _w=widths):
            _w["verify"].add(verify_ids.shape[1])
            return _f(cache, draft_cache, verify_ids, positions)

        engine._draft_fn, engine._verify_fn = draft, verify
        assert run(engine) == [models.engine(AR).generate(p, params).tokens for p in prompts]
        assert widths["draft"] == {native}
        assert min(widths["verify"]) < native  # (a lone batch row verifies the whole block)
