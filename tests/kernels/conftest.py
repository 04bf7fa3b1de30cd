"""Kernel tests: every Triton kernel runs through the CPU interpreter, on NaN-poisoned memory.

``TRITON_INTERPRET=1`` must be set before any ``@triton.jit`` kernel module is imported; this file
sets it at collection time. If another test module imported ``specpilot.kernels`` kernels first
(compiled mode), the kernel tests stop with a clear error instead of failing obscurely.
"""

import os
import sys

import pytest
import torch

os.environ["TRITON_INTERPRET"] = "1"

if "specpilot.kernels.common.interpret" in sys.modules:
    from specpilot.kernels.common.interpret import interpreting

    if not interpreting():
        raise pytest.UsageError("specpilot.kernels was imported before TRITON_INTERPRET=1 was "
                                "set; set it in the environment or in tests/conftest.py")

_INT_POISON = {torch.uint8: 0xA5, torch.int8: -91, torch.bool: True}


def _poison(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t.fill_(float("nan"))
    if t.is_complex():
        return t.fill_(complex(float("nan"), float("nan")))
    return t.fill_(_INT_POISON.get(t.dtype, -23131))


# torch remembers, on the first ``with torch.device(...)`` block of the process, which factory
# functions such a block redirects (``torch.empty`` among them). Were that first block to run while
# nan_poison has ``torch.empty`` replaced, the process would remember the replacement, and every
# later ``with torch.device("meta")`` model (the cost model's 27B shapes) would be allocated for
# real: 24 GB, killed for memory, when a later test module builds one. Let it see the real ones.
with torch.device("meta"):
    torch.empty(1)


@pytest.fixture(autouse=True)
def nan_poison(monkeypatch):
    """torch.empty / empty_like / Tensor.new_empty return NaN (floats) or garbage (ints)."""
    empty, empty_like, new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _poison(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _poison(empty_like(*a, **k)))
    monkeypatch.setattr(torch.Tensor, "new_empty",
                        lambda self, *a, **k: _poison(new_empty(self, *a, **k)))
    yield


@pytest.fixture(autouse=True)
def kernel_cache_dir(tmp_path, monkeypatch):
    """An empty tuned-config cache per test, so no test sees another's (or the user's) configs."""
    monkeypatch.setenv("SPECPILOT_CACHE_DIR", str(tmp_path / "kernel-cache"))
    yield tmp_path / "kernel-cache"



@pytest.fixture(autouse=True)
def split_counters_left_zero():
    """Every split-K and stream-K launch leaves its per-tile counters zero (the buffer is shared by
    all launches on a device, so a leftover count would corrupt a later one)."""
    yield
    from specpilot.kernels.common import launch

    for device, buf in launch._LOCKS.items():
        assert int(buf.abs().sum()) == 0, f"split counters left non-zero on {device}"
