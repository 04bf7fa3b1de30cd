"""Spec parity: greedy speculative output equals greedy AR output, token for token, on the hybrid target.

Partial acceptance at every block position is driven by the replay plan with a fixed acceptance
length k = 0..B-1 (the drafter is right for exactly k tokens, then wrong): every rollback of the
Gated-DeltaNet state to a mid-block position is exercised, for both rollback strategies.
"""

import pytest
import torch

from specpilot import tiny
from specpilot.engines.cache import CommitIndex
from specpilot.engines.cache import GDNState
from specpilot.engines.drafters.replay import AcceptanceProfile
from specpilot.engines.drafters.replay import ReplayPlan
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.recipe import AR
from specpilot.recipe import STOCK

PARAMS = SamplingParams(max_new_tokens=40, ignore_eos=True)


@pytest.fixture(scope="module", params=["tiny-dflash", "tiny-dflash2"])
def drafter(request):
    return load_model(tiny.tiny_drafter(request.param))


@pytest.fixture(scope="module")
def reference(tiny_models, tiny_prompts):
    engine = tiny_models.engine(AR)
    return [engine.generate(p, PARAMS).tokens for p in tiny_prompts[:3]]


@pytest.mark.parametrize("rollback", ["snapshot", "replay"])
def test_partial_acceptance_at_every_block_position(tiny_models, tiny_prompts, reference, drafter,
                                                    rollback):
    recipe = STOCK.replace(gdn_rollback=rollback)
    engine = Engine(tiny_models.target, drafter, recipe, max_len=512)
    block = engine.block_size
    for k in range(block):
        for prompt, ref in zip(tiny_prompts[:3], reference):
            plan = ReplayPlan(ref, AcceptanceProfile.fixed(k, block), tiny.VOCAB_SIZE)
            out = engine.generate(prompt, PARAMS, replay=plan)
            assert out.tokens == ref, f"k={k} rollback={rollback}"
            assert set(plan.drawn) == {k}
            # the target itself accepted exactly the k right drafts (the last step may run past the
            # reference, where the plan has nothing right to propose)
            assert plan.agreed[:-1] == plan.drawn[:-1]
            # every full step kept exactly k drafts + the bonus (the last step may be clipped)
            assert all(n == k + 1 for n in out.accept_lengths[:-1])


def test_random_drafter_natural_run(tiny_models, tiny_prompts, reference, drafter):
    engine = Engine(tiny_models.target, drafter, STOCK, max_len=512)
    for prompt, ref in zip(tiny_prompts[:3], reference):
        assert engine.generate(prompt, PARAMS).tokens == ref


def test_mixed_acceptance_lengths(tiny_models, tiny_prompts, reference, drafter):
    engine = Engine(tiny_models.target, drafter, STOCK.replace(gdn_rollback="replay"), max_len=512)
    for seed, (prompt, ref) in enumerate(zip(tiny_prompts[:3], reference)):
        plan = ReplayPlan(ref, AcceptanceProfile.parametric(4.0, engine.block_size),
                          tiny.VOCAB_SIZE, seed=seed)
        out = engine.generate(prompt, PARAMS, replay=plan)
        assert out.tokens == ref
        assert out.tau > 2.0


def test_snapshot_and_replay_rollback_leave_identical_state(tiny_models, tiny_prompts):
    """After committing k of B verify rows, both strategies hold the same conv and recurrent state."""
    target = tiny_models.target
    prompt = torch.tensor([tiny_prompts[0][:20]])
    block = torch.tensor([tiny_prompts[1][:8]])
    for k in (1, 3, 8):
        states = []
        for rollback in ("snapshot", "replay"):
            cache = target.new_cache(1, 64, rollback)
            target(prompt, torch.arange(20)[None], cache)
            target(block, 20 + torch.arange(8)[None], cache, commit_all=False)
            cache.commit(torch.tensor([k]), torch.tensor([20 + k]))
            states.append(cache)
        for a, b in zip(*(s.layers for s in states)):
            if hasattr(a, "recurrent"):
                torch.testing.assert_close(a.recurrent, b.recurrent, rtol=1e-5, atol=1e-6)
                assert torch.equal(a.conv, b.conv)
        # and equal to feeding only the k kept rows
        cache = target.new_cache(1, 64, "snapshot")
        target(prompt, torch.arange(20)[None], cache)
        target(block[:, :k], 20 + torch.arange(k)[None], cache)
        for a, b in zip(states[0].layers, cache.layers):
            if hasattr(a, "recurrent"):
                torch.testing.assert_close(a.recurrent, b.recurrent, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_rows", [2, 3])
def test_stacked_commit_equals_per_layer_commit(tiny_models, tiny_prompts, num_rows):
    """A cache with reserved snapshots commits every Gated-DeltaNet layer in one stacked copy; its
    state equals the per-layer commit's, also through a view of the first rows (a batch bucket)."""
    target = tiny_models.target
    prompts = torch.tensor([p[:20] for p in tiny_prompts[:2]])
    block = torch.tensor([p[:8] for p in tiny_prompts[2:4]])
    kept = torch.tensor([3, 8])
    caches = []
    for reserve in (True, False):
        cache = target.new_cache(num_rows, 64, "snapshot")
        if reserve:
            cache.reserve_snapshots(8)
        view = cache.rows(slice(0, 2))
        target(prompts, torch.arange(20).expand(2, -1), view)
        target(block, 20 + torch.arange(8).expand(2, -1), view, commit_all=False)
        pending = view.pending_rows()
        assert view._commit_stacked(pending, CommitIndex(kept)) is reserve
        view.commit(kept, 20 + kept)
        caches.append(cache)
    stacked, per_layer = caches
    gdn = [layer for layer in stacked.layers if isinstance(layer, GDNState)]
    assert len(gdn) > 1 and stacked.recurrent.shape[0] == len(gdn)
    for i, layer in enumerate(gdn):
        assert layer.recurrent.data_ptr() == stacked.recurrent[i].data_ptr()
        assert layer.conv.data_ptr() == stacked.conv[i].data_ptr()
    for a, b in zip(stacked.layers, per_layer.layers):
        if isinstance(a, GDNState):
            assert torch.equal(a.recurrent[:2], b.recurrent[:2])
            assert torch.equal(a.conv[:2], b.conv[:2])


def test_drafter_kv_is_windowed(tiny_models):
    drafter = load_model(tiny.tiny_drafter("tiny-dflash2"))
    cache = drafter.new_cache(1, 4096)
    window = drafter.window()
    assert window == 64
    assert cache.layers[0].capacity == window + 2 * drafter.block_size < 4096
