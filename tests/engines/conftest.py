"""NaN-poison uninitialised memory for engine tests: a KV slot or state read before it is written shows."""

import pytest
import torch
import torch.utils._device


@pytest.fixture(autouse=True)
def nan_poison(monkeypatch):
    # torch caches the constructors a device context (``with torch.device("meta")``) redirects on
    # first use: fill that cache with the real ``torch.empty`` before it is patched here, or every
    # later meta-device build (the cost model's) would allocate on the CPU instead
    torch.utils._device._device_constructors()
    empty, empty_like = torch.empty, torch.empty_like

    def poisoned_empty(*args, **kwargs):
        out = empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    def poisoned_empty_like(*args, **kwargs):
        out = empty_like(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty", poisoned_empty)
    monkeypatch.setattr(torch, "empty_like", poisoned_empty_like)
    yield


@pytest.fixture
def serve_all():
    """``serve_all(engine, prompts, params, max_batch)``: every request submitted at once to a new
    scheduler of ``max_batch`` rows (``params``: one SamplingParams per prompt); waits for all and
    returns (tokens per request, the scheduler's stats)."""
    import threading

    from specpilot.engines.scheduler import Scheduler

    def serve(engine, prompts, params, max_batch):
        scheduler = Scheduler(engine, max_batch=max_batch)
        got, errors = {i: [] for i in range(len(prompts))}, []
        finished = threading.Semaphore(0)

        def collect(i):
            def on_event(event):  # on the scheduler thread: record, assert in the test's own
                got[i].extend(event.new_tokens)
                if event.finished:
                    if event.error is not None:
                        errors.append(event.error)
                    finished.release()
            return on_event

        for i, (prompt, p) in enumerate(zip(prompts, params)):
            scheduler.submit(str(i), prompt, p, collect(i))
        try:
            for _ in prompts:
                assert finished.acquire(timeout=300)
        finally:
            scheduler.shutdown()
        assert not errors, errors
        return [got[i] for i in range(len(prompts))], scheduler.stats

    return serve


@pytest.fixture
def against_ar():
    """``against_ar(ar, engines, prompts, params)``: every engine of ``engines`` (name -> engine)
    on every prompt, each output asserted equal to greedy AR's; returns, per name, the prompts'
    GenerationResults and the step-weighted tau over all of them."""
    def run(ar, engines: dict, prompts, params):
        results = {name: [] for name in engines}
        for prompt in prompts:
            ref = ar.generate(prompt, params).tokens
            for name, engine in engines.items():
                out = engine.generate(prompt, params)
                assert out.tokens == ref, name
                results[name].append(out)
        taus = {}
        for name, outs in results.items():
            lengths = [n for out in outs for n in out.accept_lengths]
            taus[name] = sum(lengths) / len(lengths)
        return results, taus

    return run


@pytest.fixture
def ragged():
    """``ragged(setting, lengths, first, step)``: the setting's models, one gsm8k prompt per entry
    of ``lengths`` cut to ``first + step * i`` tokens, and each prompt's greedy AR tokens (that
    many, ignoring EOS) generated alone: the reference a batched run must reproduce."""
    from specpilot.build import load_models
    from specpilot.datasets import load_prompts
    from specpilot.engines.engine import SamplingParams
    from specpilot.recipe import AR
    from specpilot.settings import load_setting

    def make(setting: str, lengths: list[int], first: int, step: int):
        models = load_models(load_setting(setting))
        texts = load_prompts("gsm8k", len(lengths))
        prompts = [models.tokenizer.encode(t).ids[:first + step * i] for i, t in enumerate(texts)]
        ar = models.engine(AR)
        refs = [ar.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True)).tokens
                for p, n in zip(prompts, lengths)]
        return models, prompts, refs

    return make
