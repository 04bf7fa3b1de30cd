"""The batched-prefill term: one padded forward reads the weights once for all joining requests."""

import pytest

from specpilot.costmodel import GPUS
from specpilot.costmodel import prefill_ms
from specpilot.search.catalog import model_configs
from specpilot.settings import load_setting


@pytest.fixture(scope="module")
def configs():
    return model_configs(load_setting("h200_c1_qwen38-27b_dflash2"))


def test_one_request_costs_the_same_either_way(configs):
    each, batched = (prefill_ms(*configs, GPUS["h200"], 1, 100, b) for b in (False, True))
    assert each == pytest.approx(batched)


def test_batching_saves_weight_reads_and_fixed_cost(configs):
    gpu = GPUS["h200"]
    each = prefill_ms(*configs, gpu, 16, 20, batched=False)
    batched = prefill_ms(*configs, gpu, 16, 20, batched=True)
    assert batched < each / 4  # short prompts: weight-bound, 16 weight reads -> 1
    long_each = prefill_ms(*configs, gpu, 16, 2000, batched=False)
    long_batched = prefill_ms(*configs, gpu, 16, 2000, batched=True)
    assert long_batched == pytest.approx(long_each, rel=0.02)  # compute-bound: nothing to save
    with_fixed = prefill_ms(*configs, gpu, 16, 2000, batched=False, fixed_ms=100.0)
    assert with_fixed - long_each == pytest.approx(1600.0)
    assert prefill_ms(*configs, gpu, 16, 2000, True, fixed_ms=100.0) - long_batched == \
        pytest.approx(100.0)


def test_fused_snapshot_term_scales_with_requests_and_rows(configs):
    from specpilot.costmodel import snapshot_traffic_ms

    gpu = GPUS["h200"]
    one, fused = (snapshot_traffic_ms(configs[0], gpu, 1, 8, k) for k in ("per-token", "fused"))
    assert one / fused == pytest.approx(32 / 9)
    # Qwen3.8-27B: 48 layers x 3.1 MB states; 32 requests x 8 rows per-token ~ 150 GB a verify
    assert snapshot_traffic_ms(configs[0], gpu, 32, 8, "per-token") == pytest.approx(32 * one)
    assert 25.0 < snapshot_traffic_ms(configs[0], gpu, 32, 8, "per-token") < 45.0
