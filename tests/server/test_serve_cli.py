"""``specpilot serve`` refuses what it cannot serve before loading any model."""

import os
import subprocess
import sys

import pytest
import torch


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specpilot", "serve", *args],
                          check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_gpu_flag_on_a_cpu_setting():
    out = _serve("cpu_c1_tiny", "stock", "--gpu", "0")
    assert out.returncode == 2 and "runs on cpu; --gpu does not apply" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_gpu_setting_without_a_gpu():
    out = _serve("h200_c1_qwen38-27b_dflash2", "stock")
    assert out.returncode == 2 and "needs a GPU" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_engine(tmp_path):
    # no campaign has run in this (empty) campaign store, so there is no champion to serve
    out = _serve("cpu_c1_tiny", "final", env={"SPECPILOT_CAMPAIGN_DIR": str(tmp_path)})
    assert out.returncode == 2 and "has no engine 'final'" in out.stderr


def test_broken_engines_are_not_served():
    out = _serve("cpu_c1_tiny", "broken:skip-verify")
    assert out.returncode == 2 and "broken engines are for `specpilot validate` only" in out.stderr
