"""DSpark's verify-budget scheduler: verify the drafts most likely to survive, as many as pay.

survival[i, j] = prod_{s <= j} confidence[i, s] is the predicted probability that request i's draft j
and all before it are accepted. For a global budget of E extra verify tokens the expected tokens per
step are ``bs + sum of the E largest survivals`` and the step rate is ``SPS(bs + E)`` (steps per second
measured on this GPU and engine for that many verify tokens); the scheduler picks
``E* = argmax_E (bs + top_E) * SPS(bs + E)`` and gives the E* slots to the highest survivals (ties:
earlier request, then earlier position, so every request gets a prefix). Verify length = 1 + slots.
"""

import logging

import torch

log = logging.getLogger(__name__)


def survival(confidence: torch.Tensor) -> torch.Tensor:
    """[B, gamma] per-position acceptance confidences -> cumulative survival probabilities."""
    return torch.cumprod(confidence.float(), dim=1)


def table_points(sps_table, rows: int = 1) -> list[tuple[float, float]]:
    """The (tokens, steps_per_s) points that price a step over ``rows`` batch rows: a table of
    ``(tokens, steps_per_s)`` prices every row count alike; one of ``(rows, tokens, steps_per_s)``
    (measured per batch bucket) gives the points measured at ``rows``, else at the nearest
    measured row count above it, else the largest below."""
    if not sps_table or len(sps_table[0]) == 2:
        return [tuple(p) for p in sps_table]
    measured = sorted({r for r, _, _ in sps_table})
    at = next((r for r in measured if r >= rows), measured[-1])
    return [(t, s) for r, t, s in sps_table if r == at]


def steps_per_second(sps_table, num_tokens: float, rows: int = 1) -> float:
    """Piecewise-linear SPS(num_tokens) at ``rows`` batch rows (:func:`table_points`), clamped at
    the ends."""
    points = sorted(table_points(sps_table, rows))
    if not points:
        raise ValueError("an SPS table needs at least one (tokens, steps_per_s) point")
    if num_tokens <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if num_tokens <= x1:
            return y0 + (y1 - y0) * (num_tokens - x0) / (x1 - x0)
    return points[-1][1]


def choose_verify_lengths(confidence: torch.Tensor, sps_table) -> tuple[int, list[int]]:
    """(extra tokens E*, verify length per request) for confidences [B, gamma]."""
    surv = survival(confidence).cpu()
    batch, gamma = surv.shape
    order = sorted(((float(surv[i, j]), i, j) for i in range(batch) for j in range(gamma)),
                   key=lambda t: (-t[0], t[1], t[2]))
    best_extra, best_score, expected = 0, batch * steps_per_second(sps_table, batch), float(batch)
    for extra, (value, _, _) in enumerate(order, start=1):
        expected += value
        score = expected * steps_per_second(sps_table, batch + extra)
        if score > best_score:
            best_extra, best_score = extra, score
    lengths = [1] * batch
    for _, i, _ in order[:best_extra]:
        lengths[i] += 1
    log.info("dspark budget: %d extra verify tokens, lengths %s", best_extra, lengths)
    return best_extra, lengths
