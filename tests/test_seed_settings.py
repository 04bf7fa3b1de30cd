"""The seed settings load, and running one without its weights says where they go and how to get them."""

import os
import subprocess
import sys

import pytest

from specpilot import settings

SEEDS = [f"{gpu}_c1_{target}_{drafter}" for gpu in ("h100", "rtxpro6000")
         for target in ("qwen38-27b", "muse-glimmer-30b") for drafter in ("dflash2", "dspark")]


@pytest.mark.parametrize("name", SEEDS)
def test_seed_setting_parses(name):
    setting = settings.load_setting(name)
    assert setting.target.source.startswith("hf:") and setting.drafter.source.startswith("hf:")
    assert setting.engine.device == "cuda"


@pytest.mark.parametrize("command", ["validate", "bench"])
def test_missing_weights_is_a_clear_error(command, tmp_path):
    env = {**os.environ, "HF_HOME": str(tmp_path)}  # an empty Hugging Face cache
    out = subprocess.run([sys.executable, "-m", "specpilot", command, "h100_c1_qwen38-27b_dflash2"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2
    assert "weights not present at" in out.stderr
    assert "download with `huggingface-cli download Qwen/Qwen3.8-27B --revision main`" in out.stderr
    assert "Traceback" not in out.stderr
