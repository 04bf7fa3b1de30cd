"""Rejection sampling is lossless in distribution: the first emitted token is distributed as p_0."""

import torch

from specpilot.engines.decode.accept import greedy_accept
from specpilot.engines.decode.accept import rejection_accept
from specpilot.engines.decode.accept import sampling_probs

VOCAB, SAMPLES = 6, 40000


def _first_token_histogram(drafts, target_probs, draft_probs, seed=0):
    generator = torch.Generator().manual_seed(seed)
    batch = drafts.shape[0]
    num_accepted, next_token = rejection_accept(drafts, target_probs, draft_probs, generator)
    first = torch.where(num_accepted > 0, drafts[:, 0], next_token)
    return torch.bincount(first, minlength=VOCAB).float() / batch


def test_point_mass_drafts_are_lossless():
    torch.manual_seed(0)
    p = torch.softmax(torch.randn(3, VOCAB) * 2, -1)
    drafts = torch.full((SAMPLES, 2), 2)  # always propose token 2 then 2
    hist = _first_token_histogram(drafts, p.expand(SAMPLES, -1, -1), None)
    assert torch.allclose(hist, p[0], atol=0.01), (hist, p[0])


def test_sampled_drafts_are_lossless():
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(3, VOCAB) * 2, -1)
    q = torch.softmax(torch.randn(2, VOCAB), -1)
    generator = torch.Generator().manual_seed(5)
    drafts = torch.multinomial(q.expand(SAMPLES, -1, -1).reshape(-1, VOCAB), 1,
                               generator=generator).view(SAMPLES, 2)
    hist = _first_token_histogram(drafts, p.expand(SAMPLES, -1, -1), q.expand(SAMPLES, -1, -1))
    assert torch.allclose(hist, p[0], atol=0.01), (hist, p[0])


def test_second_token_follows_target_given_first():
    """With q == p the chain accepts everything and the bonus is drawn from the last row."""
    torch.manual_seed(2)
    p = torch.softmax(torch.randn(2, VOCAB), -1)
    drafts = torch.multinomial(p[0].expand(SAMPLES, -1), 1, generator=torch.Generator().manual_seed(3))
    num_accepted, bonus = rejection_accept(drafts, p.expand(SAMPLES, -1, -1),
                                           p[:1].expand(SAMPLES, -1, -1), torch.Generator())
    assert bool((num_accepted == 1).all())
    hist = torch.bincount(bonus, minlength=VOCAB).float() / SAMPLES
    assert torch.allclose(hist, p[1], atol=0.01)


def test_greedy_accept_longest_prefix():
    logits = torch.full((1, 4, 5), -1.0)
    for row, tok in enumerate([1, 2, 4, 0]):
        logits[0, row, tok] = 1.0
    num, bonus = greedy_accept(torch.tensor([[1, 2, 3]]), logits)
    assert num.tolist() == [2] and bonus.tolist() == [4]


def test_top_p_truncates():
    probs = sampling_probs(torch.tensor([[3.0, 2.0, 1.0, -5.0]]), 1.0, top_p=0.5)
    assert probs[0, 0] == 1.0 and probs[0, 1:].sum() == 0
