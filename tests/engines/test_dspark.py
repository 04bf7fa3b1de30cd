"""DSpark drafters: spec parity on both tiny targets, the Markov heads, and the verify-budget scheduler."""

import logging

import pytest
import torch

from specpilot import tiny
from specpilot.engines.decode.budget import choose_verify_lengths
from specpilot.engines.decode.budget import steps_per_second
from specpilot.engines.drafters.replay import AcceptanceProfile
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.engines.models import random_model
from specpilot.recipe import AR
from specpilot.recipe import STOCK

PARAMS = SamplingParams(max_new_tokens=26, ignore_eos=True)


@pytest.fixture(scope="module")
def targets(tiny_models):
    return {"qwen3_5": (tiny_models.target, tiny.tiny_drafter("tiny-dspark")),
            "muse": (load_model(tiny.tiny_muse_target()), tiny.tiny_drafter("tiny-muse-dspark"))}


@pytest.mark.parametrize("name,rollback", [("qwen3_5", "snapshot"), ("qwen3_5", "replay"),
                                           ("muse", "snapshot")])
def test_spec_parity_every_position(targets, tiny_prompts, name, rollback):
    target, drafter_dir = targets[name]
    drafter = load_model(drafter_dir)
    ref = Engine(target, None, AR, max_len=512).generate(tiny_prompts[0], PARAMS).tokens
    stock = Engine(target, drafter, STOCK.replace(gdn_rollback=rollback), max_len=512)
    assert stock.block_size == 8  # released default: gamma = 7, verify window gamma + 1
    for k in range(stock.block_size):
        plan = ReplayPlan(ref, AcceptanceProfile.fixed(k, 8), tiny.VOCAB_SIZE)
        assert stock.generate(tiny_prompts[0], PARAMS, replay=plan).tokens == ref, f"k={k}"
        assert plan.agreed[:-1] == plan.drawn[:-1]
    out = stock.generate(tiny_prompts[0], PARAMS)
    assert out.tokens == ref and set(out.verify_widths[:-1]) == {8}


@pytest.mark.parametrize("head", ["vanilla", "gated", "rnn"])
def test_markov_heads_walk_left_to_right(head):
    config = {**tiny.DRAFTERS["tiny-dspark"]}
    config["dspark_config"] = {**config["dspark_config"], "markov_head_type": head}
    drafter = random_model(config, seed=3)
    hidden = torch.randn(2, 7, 256)
    tokens, q = drafter.propose(hidden, torch.tensor([5, 9]), torch.nn.Linear(256, tiny.VOCAB_SIZE))
    assert tokens.shape == (2, 7) and q is None
    assert drafter.last_confidence.shape == (2, 7)
    assert bool(((drafter.last_confidence > 0) & (drafter.last_confidence < 1)).all())
    # the bias depends on the previous token: a different anchor changes the first logits' bias
    bias_a, _ = drafter.markov_head.bias(torch.tensor([5]), hidden[:1, 0], None)
    bias_b, _ = drafter.markov_head.bias(torch.tensor([9]), hidden[:1, 0], None)
    assert not torch.equal(bias_a, bias_b)


def test_budget_hand_computed_example(caplog):
    """survival [[.9,.72,.36],[.6,.3,.27]]; SPS(2)=100, SPS(4)=90, SPS(6)=60 (linear between).
    Scores: E=0: 2*100=200; E=1: 2.9*95=275.5; E=2: 3.62*90=325.8; E=3: 4.22*75=316.5 -> E*=2,
    given to the two highest survivals (0.9 and 0.72, both request 0): lengths [3, 1]."""
    confidence = torch.tensor([[0.9, 0.8, 0.5], [0.6, 0.5, 0.9]])
    table = [(2, 100.0), (4, 90.0), (6, 60.0), (8, 50.0)]
    assert steps_per_second(table, 5) == pytest.approx(75.0)
    with caplog.at_level(logging.INFO, logger="specpilot.engines.decode.budget"):
        extra, lengths = choose_verify_lengths(confidence, table)
    assert (extra, lengths) == (2, [3, 1])
    assert "2 extra verify tokens, lengths [3, 1]" in caplog.text
    # a flat SPS table verifies everything (SGLang: "zero throughput gain by itself")
    assert choose_verify_lengths(confidence, [(1, 10.0), (100, 10.0)]) == (6, [4, 4])


def test_budgeted_verify_is_lossless(targets, tiny_prompts):
    target, drafter_dir = targets["qwen3_5"]
    drafter = load_model(drafter_dir)
    ref = Engine(target, None, AR, max_len=512).generate(tiny_prompts[1], PARAMS).tokens
    recipe = STOCK.replace(verify_budget="sps", sps_table=((1, 100.0), (3, 95.0), (8, 40.0)))
    out = Engine(target, drafter, recipe, max_len=512).generate(tiny_prompts[1], PARAMS)
    assert out.tokens == ref
    assert max(out.verify_widths) < 8  # the budget trimmed the verify window


@pytest.mark.parametrize("drafter_name", ["tiny-dflash", "tiny-dflash2"])
def test_budgeted_verify_for_drafters_without_a_confidence_head(targets, tiny_prompts,
                                                                drafter_name):
    """DFlash and DFlash2 budget with their own draft probabilities: still exactly AR."""
    from specpilot import tiny

    target, _ = targets["qwen3_5"]
    drafter = load_model(tiny.tiny_drafter(drafter_name, 0))
    recipe = STOCK.replace(verify_budget="sps", sps_table=((1, 100.0), (3, 95.0), (16, 30.0)))
    engine = Engine(target, drafter, recipe, max_len=512)
    assert engine._own_confidence
    for prompt in tiny_prompts[:2]:
        ref = Engine(target, None, AR, max_len=512).generate(prompt, PARAMS).tokens
        out = engine.generate(prompt, PARAMS)
        assert out.tokens == ref
        assert max(out.verify_widths) < drafter.block_size  # the budget trimmed the window
