"""A model with its decode-path kernels on (``fused``: add + RMSNorm, short conv + gates, KV write,
q/k norm + rotary, gated output norm, all under the Triton interpreter here) computes what the
eager model computes, in float32: prefill with captured layers, AR steps, a pending verify of
several rows, its commit, and the step after it; logits, captured hidden states and every layer's
cache. The compiled element-wise functions stay eager (torch.compile is a GPU path), so only our
kernels differ between the two runs."""

import pytest
import torch

from specpilot import tiny
from specpilot.engines.models import layers
from specpilot.engines.models import load_model
from specpilot.engines.models.layers import set_fused_elementwise

PROMPT, VERIFY = 19, 5


def decode(model, fused: bool, rollback: str) -> tuple[list, list]:
    """Outputs and final cache tensors of a fixed sequence of forwards (two requests)."""
    set_fused_elementwise(model, fused)
    ids = torch.randint(5, 200, (2, PROMPT + 12), generator=torch.Generator().manual_seed(3))
    cache = model.new_cache(2, 64, rollback)
    positions = torch.arange(PROMPT)[None].expand(2, -1)
    out = model(ids[:, :PROMPT], positions, cache, capture=(1, 4))
    outs, n = [out.logits, out.aux], PROMPT
    for _ in range(2):  # AR decode
        outs.append(model(ids[:, n:n + 1], torch.full((2, 1), n), cache, last_only=True).logits)
        n += 1
    rows = n + torch.arange(VERIFY)[None].expand(2, -1)  # a verify, kept pending
    out = model(ids[:, n:n + VERIFY], rows, cache, commit_all=False, capture=(1,))
    outs += [out.logits, out.aux]
    kept = torch.tensor([2, 2])
    cache.commit(kept, n + kept)
    n += 2
    outs.append(model(ids[:, n:n + 1], torch.full((2, 1), n), cache, last_only=True).logits)
    tensors = [t for layer in cache.layers for t in vars(layer).values()
               if isinstance(t, torch.Tensor)]
    return outs, tensors


@pytest.mark.parametrize("target,rollback", [("qwen3_5", "snapshot"), ("qwen3_5", "replay"),
                                             ("muse", "snapshot")])  # Muse: attention only
def test_fused_kernels_compute_what_the_eager_model_does(target, rollback, monkeypatch):
    monkeypatch.setattr(layers, "compiled", lambda fn: fn)
    path = tiny.tiny_target() if target == "qwen3_5" else tiny.tiny_muse_target()
    model = load_model(path).float()
    eager, fused = decode(model, False, rollback), decode(model, True, rollback)
    for got, want in zip(fused[0] + fused[1], eager[0] + eager[1]):
        assert got.shape == want.shape
        if want.is_floating_point():
            assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)
        else:  # slot positions
            assert torch.equal(got, want)
