"""NaN-poison uninitialised memory for engine tests: a KV slot or state read before it is written shows."""

import pytest
import torch
import torch.utils._device


@pytest.fixture(autouse=True)
def nan_poison(monkeypatch):
    # torch caches the constructors a device context (``with torch.device("meta")``) redirects on
    # first use: fill that cache with the real ``torch.empty`` before it is patched here, or every
    # later meta-device build (the cost model's) would allocate on the CPU instead
    torch.utils._device._device_constructors()
    empty, empty_like = torch.empty, torch.empty_like

    def poisoned_empty(*args, **kwargs):
        out = empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    def poisoned_empty_like(*args, **kwargs):
        out = empty_like(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty", poisoned_empty)
    monkeypatch.setattr(torch, "empty_like", poisoned_empty_like)
    yield
