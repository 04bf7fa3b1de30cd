"""Paired speed statistics: per-prompt ratios, their median, a bootstrap CI, a stopping rule.

Speedup convention (everywhere in SpecPilot): ``ratio = A_time / B_time`` for the same prompt, so a
ratio above 1 means B is faster. The unit of resampling is one (A, B) pair measured back to back on
the same prompt; pairs of one prompt from different rounds count as separate pairs, which is right
for timing noise (what the CI is for) and slightly optimistic if prompts differ a lot in speedup.
"""

import dataclasses
import math

import numpy as np


def paired_ratios(a_times: list[float], b_times: list[float]) -> list[float]:
    """``a / b`` per pair; both lists hold times (one unit) of the same prompts in one order."""
    if len(a_times) != len(b_times):
        raise ValueError(f"paired data needs equal lengths, got {len(a_times)} and {len(b_times)}")
    bad = [i for i, (a, b) in enumerate(zip(a_times, b_times)) if not (a > 0 and b > 0)]
    if bad:
        raise ValueError(f"times must be positive; pairs {bad[:5]} are not")
    return [a / b for a, b in zip(a_times, b_times)]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100, linear interpolation) of ``values``."""
    if not values:
        raise ValueError("percentile of no values")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def bootstrap_ci(values: list[float], confidence: float = 0.95, num_resamples: int = 4000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap CI of the median of ``values``; deterministic for a given ``seed``.

    Example:
        >>> lo, hi = bootstrap_ci([1.9, 2.0, 2.1, 2.05, 1.95], seed=0)
        >>> lo <= 2.0 <= hi
        True
    """
    if not values:
        raise ValueError("bootstrap of no values")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(data), size=(num_resamples, len(data)))
    medians = np.median(data[idx], axis=1)  # [num_resamples]
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(medians, [alpha, 1 - alpha])
    return float(lo), float(hi)


@dataclasses.dataclass(frozen=True)
class SpeedupEstimate:
    """Median of the paired ratios with its bootstrap CI (``half_width`` = (hi - lo) / 2)."""

    median_speedup: float
    ci95: tuple[float, float]
    num_pairs: int

    @property
    def half_width(self) -> float:
        return (self.ci95[1] - self.ci95[0]) / 2

    def to_dict(self) -> dict:
        return {"median_speedup": self.median_speedup, "ci95": list(self.ci95),
                "half_width": self.half_width, "num_pairs": self.num_pairs}


def estimate_speedup(ratios: list[float], seed: int = 0,
                     num_resamples: int = 4000) -> SpeedupEstimate:
    """Median speedup and 95% CI of paired ratios (A_time / B_time; > 1: B is faster)."""
    median = float(np.median(np.asarray(ratios, dtype=np.float64))) if ratios else math.nan
    ci = bootstrap_ci(ratios, 0.95, num_resamples, seed) if ratios else (math.nan, math.nan)
    return SpeedupEstimate(median, ci, len(ratios))


@dataclasses.dataclass(frozen=True)
class StoppingRule:
    """When an interleaved A/B run may stop.

    Checked after every complete round over the prompts: stop once ``min_rounds`` are done and the
    CI half-width is at most ``target_half_width``, or after ``max_rounds``. The time budget is
    checked after every pair, so a slow engine cannot overrun it by a whole round.
    """

    target_half_width: float = 0.02
    time_budget_s: float = 600.0
    min_rounds: int = 2
    max_rounds: int = 20

    def __post_init__(self):
        if self.target_half_width <= 0:
            raise ValueError(f"target_half_width must be > 0, got {self.target_half_width}")
        if self.time_budget_s <= 0:
            raise ValueError(f"time_budget_s must be > 0, got {self.time_budget_s}")
        if not 1 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"need 1 <= min_rounds ({self.min_rounds}) <= max_rounds "
                             f"({self.max_rounds})")

    def out_of_time(self, elapsed_s: float) -> bool:
        return elapsed_s >= self.time_budget_s

    def after_round(self, num_rounds: int, estimate: SpeedupEstimate) -> str | None:
        """The stop reason after ``num_rounds`` complete rounds, or None to keep going."""
        if num_rounds >= self.min_rounds and estimate.half_width <= self.target_half_width:
            return "ci_target"
        if num_rounds >= self.max_rounds:
            return "max_rounds"
        return None
