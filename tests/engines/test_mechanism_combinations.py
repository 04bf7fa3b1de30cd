"""Mechanisms combined stay lossless: greedy output equals greedy AR, token for token, for recipes
that stack rollback, the snapshot kernel, verify width, the adaptive verify budget, tree
verification, deeper drafting, batched prefill, grouped admission, overlapped scheduling and
two-stage verification, one request and batched, on the trained tiny hybrid pair (real, mixed
acceptance) and the Muse pair."""

import pytest

from specpilot.build import load_models
from specpilot.datasets import load_prompts
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import generate_all
from specpilot.engines.engine import SamplingParams
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

PARAMS = SamplingParams(max_new_tokens=24, ignore_eos=True)
# the fused snapshot kernel runs in the Triton interpreter on CPU: its recipes check the first 12
FUSED_PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)
SPS = ((1, 100.0), (3, 90.0), (8, 50.0), (16, 30.0))  # verify rows -> steps per second

SINGLE = {
    "replay, 5 rows": {"gdn_rollback": "replay", "block_size": 5},
    "snapshot, sps budget": {"verify_budget": "sps", "sps_table": SPS},
    "replay, sps budget, 6 rows": {"gdn_rollback": "replay", "verify_budget": "sps",
                                   "sps_table": SPS, "block_size": 6},
    "tree, replay": {"tree_branches": 2, "tree_positions": 2, "tree_max_nodes": 16,
                     "gdn_rollback": "replay"},
    "tree, 6 rows": {"tree_branches": 3, "tree_positions": 1, "tree_max_nodes": 12,
                     "block_size": 6},
    "deeper drafting, replay": {"draft_depth": 2, "gdn_rollback": "replay"},
    "deeper drafting x3, fused snapshot": {"draft_depth": 3, "gdn_snapshot": "fused"},
    # the one-launch snapshot kernel (Triton, interpreted on CPU in tests)
    "fused snapshot, sps budget": {"gdn_snapshot": "fused", "verify_budget": "sps",
                                   "sps_table": SPS},
}
BATCHED = {
    "replay, 4 rows": {"gdn_rollback": "replay", "block_size": 4},
    "snapshot, 3 rows": {"block_size": 3},
    "fused snapshot, batched prefill": {"gdn_snapshot": "fused", "batched_prefill": True},
    "overlap, 5 rows, batched prefill": {"overlap_schedule": True, "block_size": 5,
                                         "batched_prefill": True},
    # attention-only targets (the Muse pair); tests/engines/test_two_stage.py forces acceptances
    "two stage, widths, batched prefill, admission": {
        "two_stage": ((4, 10, 4),), "verify_widths": ((2, 6),), "batched_prefill": True,
        "admit_ratio": 0.5, "admit_max_wait_steps": 2},
}
HYBRID_UNSUPPORTED = {"two stage, widths, batched prefill, admission"}


@pytest.fixture(scope="module", params=["cpu_c1_tiny", "cpu_c1_tiny-muse"])
def pair(request):
    models = load_models(load_setting(request.param))
    prompts = [models.tokenizer.encode(t).ids[:24 + 6 * i]
               for i, t in enumerate(load_prompts("gsm8k", 3))]
    ar = models.engine(AR)
    return models, prompts, [ar.generate(p, PARAMS).tokens for p in prompts]


def params_for(changes: dict) -> SamplingParams:
    """Greedy, 24 new tokens; 12 where the recipe runs the fused snapshot kernel (a prefix of
    the same greedy tokens)."""
    return FUSED_PARAMS if changes.get("gdn_snapshot") == "fused" else PARAMS


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_one_request(pair, name):
    models, prompts, reference = pair
    changes = SINGLE[name]
    if "cpu_c1_tiny-muse" == models.setting.name and "gdn_rollback" in changes:
        changes = {k: v for k, v in changes.items() if k != "gdn_rollback"}  # no GDN layers
    engine = models.engine(STOCK.replace(name=name, **changes))
    params = params_for(changes)
    outs = [engine.generate(p, params) for p in prompts]
    assert [o.tokens for o in outs] == [r[:params.max_new_tokens] for r in reference]
    if models.setting.name == "cpu_c1_tiny":  # the trained pair accepts several drafts a step
        assert max(n for o in outs for n in o.accept_lengths) > 1


@pytest.mark.parametrize("name", sorted(BATCHED))
def test_batched(pair, name):
    models, prompts, reference = pair
    if name in HYBRID_UNSUPPORTED and models.setting.name == "cpu_c1_tiny":
        pytest.skip("two-stage verification runs on attention-only targets")
    engine = models.engine(STOCK.replace(name=name, **BATCHED[name]))
    batch = BatchEngine(engine, 4, pad_to_buckets=True)  # 3 rows on the bucket of 4
    params = params_for(BATCHED[name])
    assert generate_all(batch, prompts, params) == [r[:params.max_new_tokens] for r in reference]
    assert (batch.overlapped_steps > 0) == engine.recipe.overlap_schedule
