"""Lossless at T > 0, end to end: speculative sampling draws the first tokens with exactly the AR
distribution (chi-square against the exact joint of the first two tokens), for sampled DFlash2
selector drafts, sampled DSpark Markov drafts and greedy point-mass drafts; a lossy acceptance rule
is caught by the same test."""

import pytest
import torch

from specpilot.engines.decode.accept import sampling_probs
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.recipe import STOCK

TEMPERATURE, NUM_SAMPLES = 0.1, 400
# chi-square critical values at alpha = 0.001 by degrees of freedom
CHI2_CRITICAL = dict(zip(range(3, 21), [16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59,
                                        31.26, 32.91, 34.53, 36.12, 37.70, 39.25, 40.79, 42.31,
                                        43.82, 45.31]))


class _AcceptEverything(Engine):
    """Lossy on purpose: keeps every draft and samples the bonus from the last row."""

    def _accept(self, drafts, logits, draft_probs, params, generator):
        last = sampling_probs(logits[:, -1], params.temperature, params.top_p)
        return (torch.full((drafts.shape[0],), drafts.shape[1]),
                torch.multinomial(last, 1, generator=generator)[:, 0])


@pytest.fixture(scope="module")
def exact_joint(tiny_models, tiny_prompts):
    """P(t1, t2) under AR sampling for the prompt, on the pairs with the most mass."""
    target, prompt = tiny_models.target, tiny_prompts[3][:24]
    with torch.inference_mode():
        cache = target.new_cache(1, 64)
        out = target(torch.tensor([prompt]), torch.arange(len(prompt))[None], cache)
        p1 = sampling_probs(out.logits[0, -1:], TEMPERATURE)[0]
        joint = {}
        for t1 in torch.topk(p1, 8).indices.tolist():
            branch = target.new_cache(1, 64)
            ids = torch.tensor([prompt + [t1]])
            out = target(ids, torch.arange(ids.shape[1])[None], branch)
            p2 = sampling_probs(out.logits[0, -1:], TEMPERATURE)[0]
            for t2 in torch.topk(p2, 8).indices.tolist():
                joint[(t1, t2)] = float(p1[t1] * p2[t2])
    return prompt, joint


def _chi_square(counts: dict, joint: dict, n: int) -> tuple[float, int]:
    cells = [pair for pair, p in joint.items() if p * n >= 5]
    rest = 1.0 - sum(joint[c] for c in cells)
    stat = sum((counts.get(c, 0) - n * joint[c]) ** 2 / (n * joint[c]) for c in cells)
    observed_rest = n - sum(counts.get(c, 0) for c in cells)
    stat += (observed_rest - n * rest) ** 2 / (n * rest)
    return stat, len(cells)  # degrees of freedom = (cells + 1) - 1


def _sample_pairs(engine, prompt) -> dict:
    counts = {}
    for seed in range(NUM_SAMPLES):
        params = SamplingParams(max_new_tokens=3, temperature=TEMPERATURE, seed=seed,
                                ignore_eos=True)
        pair = tuple(engine.generate(prompt, params).tokens[:2])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


@pytest.mark.parametrize("drafter,draft_sampling", [("tiny-dflash2", "sample"),
                                                    ("tiny-dflash2", "greedy"),
                                                    ("tiny-dspark", "sample")])
def test_speculative_sampling_matches_ar_distribution(tiny_models, exact_joint, drafter,
                                                      draft_sampling):
    """DFlash2's selector walk and DSpark's Markov walk: q is the distribution each draws from."""
    from specpilot import tiny
    from specpilot.engines.models import load_model

    prompt, joint = exact_joint
    engine = Engine(tiny_models.target, load_model(tiny.tiny_drafter(drafter)),
                    STOCK.replace(draft_sampling=draft_sampling), max_len=512)
    stat, dof = _chi_square(_sample_pairs(engine, prompt), joint, NUM_SAMPLES)
    assert 3 <= dof <= 20, "the test needs several likely pairs"
    assert stat < CHI2_CRITICAL[dof], (stat, dof)


def test_lossy_acceptance_is_detected(tiny_models, exact_joint):
    prompt, joint = exact_joint
    engine = _AcceptEverything(tiny_models.target, tiny_models.drafter, STOCK)
    stat, dof = _chi_square(_sample_pairs(engine, prompt), joint, NUM_SAMPLES)
    assert stat > CHI2_CRITICAL[dof], (stat, dof)
