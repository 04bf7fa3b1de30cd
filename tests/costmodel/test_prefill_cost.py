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


def test_admission_term_trades_shared_prefills_against_idle_rows(configs):
    from specpilot.costmodel import admission_ms

    gpu = GPUS["h200"]
    common = (*configs, gpu, 32, 128, 50.0)  # 32 requests, 128-token prompts, 50 ms steps
    at_once = admission_ms(*common, 0.5, 0.0, 0)
    assert at_once["group"] == 1.0 and at_once["idle_ms"] == 0.0  # < 1 finish a step: alone
    grouped = admission_ms(*common, 0.5, 0.25, 4)  # gathers 0.5 x 5 steps = 2.5 requests
    assert grouped["group"] == pytest.approx(2.5)
    assert grouped["idle_ms"] == pytest.approx(1.5 / (2 * 0.5) * 50.0 / 32)
    # an eager prefill's fixed cost (launches, host work) is what grouping divides
    fixed_now = admission_ms(*common, 0.5, 0.0, 0, fixed_ms=30.0)
    fixed_grouped = admission_ms(*common, 0.5, 0.25, 4, fixed_ms=30.0)
    assert fixed_grouped["total_ms"] < fixed_now["total_ms"]
    assert fixed_now["total_ms"] - at_once["total_ms"] == pytest.approx(30.0)
    # many finishes a step: a group forms at once anyway, the ratio caps what grouping adds
    busy = admission_ms(*common, 4.0, 0.25, 4)  # joinable >= 0.25 x running: 6.4 of 32 rows
    assert busy["group"] == pytest.approx(6.4) and busy["idle_ms"] == pytest.approx(
        (6.4 - 4.0) / 8.0 * 50.0 / 32)
