"""The bootstrap CI on synthetic paired data whose true speedup is known."""

import math

import numpy as np
import pytest

from specpilot.bench.stats import StoppingRule
from specpilot.bench.stats import bootstrap_ci
from specpilot.bench.stats import estimate_speedup
from specpilot.bench.stats import paired_ratios


def synthetic_pairs(true_speedup: float, num_pairs: int, noise: float, seed: int):
    """(A times, B times): per-prompt base cost, B = A / true_speedup, lognormal noise on each."""
    rng = np.random.default_rng(seed)
    base_ms = rng.uniform(5.0, 50.0, num_pairs)  # prompts differ a lot in cost
    a = base_ms * np.exp(rng.normal(0.0, noise, num_pairs))
    b = base_ms / true_speedup * np.exp(rng.normal(0.0, noise, num_pairs))
    return a.tolist(), b.tolist()


def test_ratios_are_a_over_b():
    assert paired_ratios([10.0, 9.0], [5.0, 3.0]) == [2.0, 3.0]


@pytest.mark.parametrize("a,b,message", [([1.0], [1.0, 2.0], "equal lengths"),
                                         ([1.0, 0.0], [1.0, 1.0], "positive")])
def test_ratios_reject_bad_pairs(a, b, message):
    with pytest.raises(ValueError, match=message):
        paired_ratios(a, b)


@pytest.mark.parametrize("true_speedup", [0.8, 1.0, 2.5])
def test_median_and_ci_recover_the_known_speedup(true_speedup):
    a, b = synthetic_pairs(true_speedup, num_pairs=200, noise=0.05, seed=1)
    estimate = estimate_speedup(paired_ratios(a, b), seed=0)
    lo, hi = estimate.ci95
    assert lo <= true_speedup <= hi
    assert estimate.median_speedup == pytest.approx(true_speedup, rel=0.02)
    assert estimate.half_width < 0.03 * true_speedup
    assert estimate.num_pairs == 200


def test_ci_covers_the_truth_about_95_percent_of_the_time():
    hits = 0
    for trial in range(200):
        a, b = synthetic_pairs(1.7, num_pairs=40, noise=0.1, seed=1000 + trial)
        lo, hi = bootstrap_ci(paired_ratios(a, b), num_resamples=1000, seed=trial)
        hits += lo <= 1.7 <= hi
    assert 0.88 <= hits / 200 <= 0.995  # a percentile bootstrap of a median is near nominal


def test_ci_narrows_with_more_pairs():
    widths = []
    for n in (10, 40, 160):
        a, b = synthetic_pairs(1.3, num_pairs=n, noise=0.1, seed=7)
        widths.append(estimate_speedup(paired_ratios(a, b), seed=0).half_width)
    assert widths[0] > widths[1] > widths[2]


def test_bootstrap_is_deterministic_for_a_seed():
    a, b = synthetic_pairs(2.0, num_pairs=30, noise=0.2, seed=3)
    ratios = paired_ratios(a, b)
    assert bootstrap_ci(ratios, seed=5) == bootstrap_ci(ratios, seed=5)
    assert bootstrap_ci(ratios, seed=5) != bootstrap_ci(ratios, seed=6)


def test_no_pairs_gives_nan_not_a_number_made_up():
    estimate = estimate_speedup([])
    assert math.isnan(estimate.median_speedup) and math.isnan(estimate.half_width)


def test_stopping_rule():
    rule = StoppingRule(target_half_width=0.05, time_budget_s=10.0, min_rounds=2, max_rounds=4)
    tight = estimate_speedup([2.0] * 8)
    wide = estimate_speedup([1.0, 3.0] * 4)
    assert rule.after_round(1, tight) is None  # not before min_rounds
    assert rule.after_round(2, tight) == "ci_target"
    assert rule.after_round(3, wide) is None
    assert rule.after_round(4, wide) == "max_rounds"
    assert not rule.out_of_time(9.9) and rule.out_of_time(10.0)
    with pytest.raises(ValueError, match="min_rounds"):
        StoppingRule(min_rounds=5, max_rounds=2)
