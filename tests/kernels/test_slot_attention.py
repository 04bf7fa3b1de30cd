"""Slot attention under the Triton interpreter against its torch reference, and the reference
against the engine's mask + SDPA path: GQA groups (1, 2, 3, 16), odd head dims, ring slots and
empty slots, windows, a cache of more chunks than splits, strided q and gate views, a query that
sees nothing, and a row's result that does not depend on how many rows the launch has."""

import pytest
import torch

from specpilot.engines.cache import visible_slots
from specpilot.engines.models.layers import masked_attention
from specpilot.kernels.slot_attention import slot_attention
from specpilot.kernels.slot_attention import slot_attention_ref


def _case(batch, tokens, heads, kv_heads, dim, slots, dtype, seed, gated=False):
    g = torch.Generator().manual_seed(seed)
    merged = torch.randn(batch, tokens, heads, 2 * dim, generator=g).to(dtype)
    q, gate = merged[..., :dim], merged[..., dim:]  # strided views, as the q/gate split
    cache_k = torch.randn(batch, slots, kv_heads, dim, generator=g).to(dtype)
    cache_v = torch.randn(batch, slots, kv_heads, dim, generator=g).to(dtype)
    ends = torch.randint(tokens, 3 * slots, (batch,), generator=g)
    positions = ends[:, None] - tokens + 1 + torch.arange(tokens)
    # each slot holds the latest position p <= end with p % slots == slot; a few are left empty
    slot_ids = torch.arange(slots)
    cache_pos = ends[:, None] - ((ends[:, None] - slot_ids) % slots)
    cache_pos = torch.where(cache_pos < 0, -1, cache_pos)
    cache_pos[:, ::5] = -1
    return q, cache_k, cache_v, cache_pos, positions, (gate if gated else None)


@pytest.mark.parametrize("batch,tokens,heads,kv_heads,dim,slots,window", [
    (1, 1, 6, 2, 32, 37, None), (2, 3, 4, 4, 40, 70, None), (1, 2, 16, 1, 16, 150, 9),
    (3, 1, 2, 1, 24, 5, None), (1, 2, 4, 2, 16, 2200, 700)])  # last: splits of several chunks
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_reference(batch, tokens, heads, kv_heads, dim, slots, window, dtype):
    args = _case(batch, tokens, heads, kv_heads, dim, slots, dtype, seed=dim + slots, gated=True)
    q, cache_k, cache_v, cache_pos, positions, gate = args
    scale = dim ** -0.5
    for g in (None, gate):
        got = slot_attention(q, cache_k, cache_v, cache_pos, positions, scale, window, g)
        want = slot_attention_ref(q, cache_k, cache_v, cache_pos, positions, scale, window, g)
        assert got.shape == want.shape == q.shape and got.dtype == dtype
        # bf16: the interpreter rounds p to bf16 by truncation before P.V (the GPU rounds to even)
        tol = 1e-5 if dtype == torch.float32 else 3e-2
        torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def test_reference_is_the_engines_masked_sdpa():
    q, cache_k, cache_v, cache_pos, positions, _ = _case(2, 3, 6, 2, 32, 40, torch.float32, 7)
    for window in (None, 6):
        mask = visible_slots(cache_pos, positions, None, window)
        want = masked_attention(q, cache_k, cache_v, mask, 0.2)
        got = slot_attention_ref(q, cache_k, cache_v, cache_pos, positions, 0.2, window)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_row_result_does_not_depend_on_launch_width():
    """The last row of a 4-row verify equals the same query decoded alone, bit for bit."""
    q, cache_k, cache_v, cache_pos, positions, gate = _case(1, 4, 6, 2, 32, 90, torch.float32, 3,
                                                            gated=True)
    wide = slot_attention(q, cache_k, cache_v, cache_pos, positions, 0.3, None, gate)
    alone = slot_attention(q[:, 3:], cache_k, cache_v, cache_pos, positions[:, 3:], 0.3, None,
                           gate[:, 3:])
    assert torch.equal(wide[:, 3:], alone)


def test_query_that_sees_nothing_gets_zeros():
    q, cache_k, cache_v, cache_pos, positions, _ = _case(1, 2, 4, 2, 16, 20, torch.float32, 5)
    cache_pos[0, :] = -1
    cache_pos[0, 3] = int(positions[0, 1])  # only the second query sees a slot
    out = slot_attention(q, cache_k, cache_v, cache_pos, positions, 0.25)
    assert torch.equal(out[0, 0], torch.zeros_like(out[0, 0]))
    torch.testing.assert_close(out[0, 1], cache_v[0, 3].repeat_interleave(2, dim=0))


def test_rejects_mismatched_shapes():
    q = torch.zeros(1, 1, 6, 16)
    cache = torch.zeros(1, 8, 4, 16)  # 6 heads over 4 kv heads: no whole group
    with pytest.raises(ValueError, match="do not match"):
        slot_attention(q, cache, cache.clone(), torch.zeros(1, 8, dtype=torch.long),
                       torch.zeros(1, 1, dtype=torch.long), 0.25)
