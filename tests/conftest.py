"""Shared test setup: an isolated SPECPILOT_HOME and the tiny checkpoints of the real architectures."""

import os
import tempfile

import pytest

os.environ.setdefault("SPECPILOT_HOME", tempfile.mkdtemp(prefix="specpilot-test-"))
# Result records written by tests go to a temporary store, never into experiments/results.
os.environ.setdefault("SPECPILOT_RESULTS_DIR", tempfile.mkdtemp(prefix="specpilot-results-"))
# No GPU in CI: Triton kernels run in its interpreter (set before anything imports triton).
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny_models():
    """The generated random tiny pair (Qwen3.5 hybrid target, DFlash2 drafter) and the tokenizer,
    on cpu_c1_tiny's engine settings. Every generated tiny drafter fits this target; cpu_c1_tiny
    itself ships the trained pair (tests/test_trained_tiny.py)."""
    import dataclasses

    from specpilot.build import load_models
    from specpilot.settings import ModelSource
    from specpilot.settings import load_setting

    setting = dataclasses.replace(load_setting("cpu_c1_tiny"),
                                  target=ModelSource("generated:tiny-qwen3_5"),
                                  drafter=ModelSource("generated:tiny-dflash2"))
    return load_models(setting)


@pytest.fixture(scope="session")
def tiny_prompts(tiny_models):
    """16 tokenised gsm8k prompts, truncated to 48 tokens to keep CPU runs short."""
    from specpilot.datasets import load_prompts

    return [tiny_models.tokenizer.encode(p).ids[:48] for p in load_prompts("gsm8k", 16)]


@pytest.fixture(scope="session")
def default_campaign(tmp_path_factory):
    """The README's main job run once (``tests/default_campaign.py``); read it, or copy it before
    changing anything."""
    from tests.default_campaign import run_default_campaign

    return run_default_campaign(tmp_path_factory.mktemp("default-campaign"))


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.gpu(kind, est_s)`` tests need CUDA; without it they are skipped, never run."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU (marked gpu)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
