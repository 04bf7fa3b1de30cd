"""The KV-cache write kernel equals its reference (index_put) bit for bit under the Triton
interpreter: strided k/v views (split from a merged projection), ring slots, a view of some rows
of a larger cache, and nothing else written."""

import pytest
import torch

from specpilot.kernels.kv_write import kv_write
from specpilot.kernels.kv_write.reference import kv_write_ref


@pytest.mark.parametrize("batch,tokens,heads,dim,slots", [(1, 1, 2, 16, 8), (3, 5, 1, 40, 7),
                                                          (2, 4, 3, 8, 16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_reference(batch, tokens, heads, dim, slots, dtype):
    g = torch.Generator().manual_seed(batch * 100 + tokens)
    merged = torch.randn(batch, tokens, 3 * heads * dim + 5, generator=g).to(dtype)
    k = merged[..., :heads * dim].view(batch, tokens, heads, dim)  # strided rows, as the split
    v = merged[..., 2 * heads * dim:3 * heads * dim].reshape(batch, tokens, heads, dim)
    start = torch.randint(0, 30, (batch, 1), generator=g)
    positions = start + torch.arange(tokens)  # wraps around the ring when start is large
    outs = []
    for kernel in (kv_write, kv_write_ref):
        full_k = torch.full((batch + 1, slots, heads, dim), -3.0, dtype=dtype)
        full_v, full_pos = full_k.clone(), torch.full((batch + 1, slots), -1, dtype=torch.long)
        kernel(full_k[1:], full_v[1:], full_pos[1:], k, v, positions)  # rows 1.. of the cache
        outs.append((full_k, full_v, full_pos))
    for got, want in zip(*outs):
        assert torch.equal(got, want)
    assert (outs[0][2][0] == -1).all() and (outs[0][0][0] == -3.0).all()


def test_rejects_mismatched_shapes():
    cache = torch.zeros(1, 4, 2, 8)
    with pytest.raises(ValueError, match="do not match"):
        kv_write(cache, cache.clone(), torch.zeros(1, 4, dtype=torch.long),
                 torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8),
                 torch.zeros(1, 2, dtype=torch.long))
