"""Greedy AR decode runs one step ahead of the host (``Engine._ar_chain``): the same tokens as the
step-by-step loop, a stop token still ends the request where it appears, the budget is kept, and
each step is queued before the previous step's token is read."""

from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.timing import PhaseTimer
from specpilot.recipe import AR

PARAMS = SamplingParams(max_new_tokens=16, ignore_eos=True)


def test_chained_decode_equals_the_step_loop(tiny_models, tiny_prompts):
    engine = tiny_models.engine(AR)
    for prompt in tiny_prompts[:2]:
        chained = engine.generate(prompt, PARAMS)
        looped = engine.generate(prompt, PARAMS, timer=PhaseTimer(engine.device))  # no chain
        assert chained.tokens == looped.tokens and len(chained.tokens) == PARAMS.max_new_tokens
        assert chained.accept_lengths == looped.accept_lengths == [1] * (PARAMS.max_new_tokens - 1)
        assert chained.verify_widths == looped.verify_widths


def test_stop_token_and_budget(tiny_models, tiny_prompts):
    engine = tiny_models.engine(AR)
    prompt = tiny_prompts[0]
    full = engine.generate(prompt, PARAMS).tokens
    stop_at = full.index(full[6])  # the first position holding that token
    stopped = engine.generate(prompt, SamplingParams(max_new_tokens=16, ignore_eos=True,
                                                     stop_token_ids=(full[6],)))
    assert stopped.tokens == full[:stop_at + 1] and stopped.finish_reason == "stop"
    for budget in (1, 2, 5):
        out = engine.generate(prompt, SamplingParams(max_new_tokens=budget, ignore_eos=True))
        assert out.tokens == full[:budget] and out.finish_reason == "length"


def test_each_step_is_queued_before_the_previous_token_is_read(tiny_models, tiny_prompts,
                                                               monkeypatch):
    engine = tiny_models.engine(AR)
    events = []
    chain, decode_next = Engine._ar_chain, Engine._decode_next_fn

    def step(self, cache, ids, positions):
        events.append("step")
        return decode_next(self, cache, ids, positions)

    def ar_chain(self, tokens, *args):
        class Tokens(list):
            def append(self, token):
                events.append("read")
                super().append(token)
        watched = Tokens(tokens)
        steps = chain(self, watched, *args)
        tokens[:] = watched
        return steps

    monkeypatch.setattr(Engine, "_decode_next_fn", step)
    monkeypatch.setattr(Engine, "_ar_chain", ar_chain)
    out = engine.generate(tiny_prompts[0], SamplingParams(max_new_tokens=5, ignore_eos=True))
    assert len(out.tokens) == 5
    # 4 steps: two queued, then each read makes room for the next; the last step is not exceeded
    assert events == ["step", "step", "read", "step", "read", "step", "read", "read"]
