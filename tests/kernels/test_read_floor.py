"""experiments/h200_read_floor.py: the read kernel that bounds issue 3's targets per shape must
load every word of its buffer once (its stored xor of each program's chunk proves it)."""

import sys
from functools import reduce
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import h200_read_floor as rf  # noqa: E402


@pytest.mark.parametrize("words, cfg", [(5000, (4096, 256, 4, 1)), (1024, (16384, 1024, 4, 3))])
def test_read_kernel_folds_every_word_of_each_chunk(words, cfg):
    gen = torch.Generator().manual_seed(0)
    buf = torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, generator=gen)
    out = torch.zeros(8, dtype=torch.int32)
    rf.read_call(buf, out, cfg)
    chunk = cfg[0] // 4
    for p in range(-(-words // chunk)):
        part = buf[p * chunk:(p + 1) * chunk].tolist()
        assert out[p].item() == reduce(lambda a, b: a ^ b, part)
