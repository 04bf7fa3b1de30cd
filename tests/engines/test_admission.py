"""Grouped admission (recipe ``admit_ratio`` / ``admit_max_wait_steps``): queued requests wait
for a group to join together, never past the step bound, and every request still gets its greedy
AR tokens."""

import pytest

from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.admission import Admission
from specpilot.engines.engine import SamplingParams
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

GROUPED = {"admit_ratio": 1.0, "admit_max_wait_steps": 6}


def test_at_once_admits_whenever_a_request_can_join():
    admission = Admission()
    assert admission.ready(1, 31) and admission.ready(5, 3)
    assert not admission.ready(0, 4)


def test_grouped_waits_for_its_ratio_or_the_step_bound():
    admission = Admission(ratio=0.5, max_wait_steps=3)
    assert admission.ready(2, 0)  # nothing running: nothing to stall, join now
    assert not admission.ready(1, 8) and not admission.ready(2, 8)  # 1, 2 < 0.5 x 8
    assert admission.ready(4, 8)  # the ratio is met
    assert admission.waited_steps == 0
    waits = [admission.ready(1, 8) for _ in range(5)]
    assert waits == [False, False, False, True, False]  # 3 steps waited, then forced
    assert not admission.ready(0, 8) and admission.waited_steps == 0  # nobody left to join


@pytest.mark.parametrize("changes,message", [
    ({"admit_ratio": 0.5}, "go together"), ({"admit_max_wait_steps": 2}, "go together"),
    ({"admit_ratio": -1.0, "admit_max_wait_steps": 2}, "admit_ratio must be a number in 0..4"),
    ({"admit_ratio": True, "admit_max_wait_steps": 2}, "admit_ratio must be a number"),
    ({"admit_ratio": 0.5, "admit_max_wait_steps": 65}, "admit_max_wait_steps must be an integer"),
])
def test_bad_admission_options_are_clear_errors(changes, message):
    with pytest.raises(SpecPilotError, match=message):
        STOCK.replace(**changes)


@pytest.mark.parametrize("setting", ["cpu_c1_tiny", "cpu_c1_tiny-muse"])
def test_grouped_admission_keeps_tokens_and_joins_in_fewer_rounds(setting, serve_all):
    """8 requests of ragged lengths through 4 rows: with grouped admission (and batched prefill,
    and on the hybrid pair the fused snapshot kernel) every request equals its greedy AR tokens
    alone, and the requests join in fewer prefill rounds than when each joins at once."""
    models = load_models(load_setting(setting))
    prompts = [models.tokenizer.encode(t).ids[:10 + 3 * (i % 5)]
               for i, t in enumerate(load_prompts("gsm8k", 8))]
    lengths = [6 + (7 * i) % 11 for i in range(8)]  # rows free up at different steps
    ar = models.engine(AR)
    alone = [ar.generate(p, SamplingParams(max_new_tokens=n, ignore_eos=True)).tokens
             for p, n in zip(prompts, lengths)]
    fused = {"gdn_snapshot": "fused"} if setting == "cpu_c1_tiny" else {}  # the hybrid pair
    grouped = STOCK.replace(name="grouped", batched_prefill=True, **GROUPED, **fused)
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in lengths]
    tokens, grouped_stats = serve_all(models.engine(grouped), prompts, params, 4)
    assert tokens == alone
    tokens, at_once_stats = serve_all(models.engine(STOCK.replace(batched_prefill=True)), prompts,
                                      params, 4)
    assert tokens == alone
    assert grouped_stats.admissions_total < at_once_stats.admissions_total
