"""``MMA_V2``'s compile-time switch (kernels/common/mma.py) sets Triton's variable only inside
its block and restores the environment as it was, also when the block raises."""

import os

import pytest

from specpilot.kernels.common.mma import ENV
from specpilot.kernels.common.mma import mma_v2_compile


@pytest.mark.parametrize("before", [None, "0"])
def test_sets_the_variable_only_inside_and_restores_it(monkeypatch, before):
    if before is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, before)
    with mma_v2_compile(False):
        assert os.environ.get(ENV) == before
    with mma_v2_compile(True):
        assert os.environ[ENV] == "1"
    assert os.environ.get(ENV) == before
    with pytest.raises(RuntimeError), mma_v2_compile(True):
        raise RuntimeError("a failed compile")
    assert os.environ.get(ENV) == before
