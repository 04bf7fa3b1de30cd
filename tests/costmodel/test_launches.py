"""Kernels per phase come from the engine's own step functions; the gap table's prediction adds their
fixed cost to the floor at the AR step's bandwidth efficiency."""

import json
from pathlib import Path

import pytest

from specpilot.costmodel import GPUS
from specpilot.costmodel import bandwidth_efficiency
from specpilot.costmodel import engine_costs
from specpilot.costmodel import kernel_counts
from specpilot.costmodel import measure_launch_us
from specpilot.costmodel import predicted_ms
from specpilot.costmodel.launches import AR_GRAPH_SELF_FEED
from specpilot.costmodel.launches import GRAPH_INPUT_COPIES
from specpilot.recipe import STOCK
from specpilot.search.catalog import model_configs

SETTING = Path(__file__).resolve().parents[2] / "settings" / "h200_c1_qwen38-27b_dflash2"
TARGET = json.loads((SETTING / "target_config.json").read_text())
DRAFTER = json.loads((SETTING / "drafter_config.json").read_text())


def configs(num_layers: int) -> tuple[dict, dict]:
    """The seed-scale pair cut to ``num_layers`` target layers (every 4th full attention)."""
    drafter = json.loads(json.dumps(DRAFTER))
    drafter["dflash_config"]["target_layer_ids"] = [0, 1, 2, num_layers - 2, num_layers - 1]
    drafter["num_target_layers"] = num_layers
    return {**TARGET, "num_hidden_layers": num_layers}, drafter


def counts(num_layers: int, **recipe) -> dict[str, int]:
    return kernel_counts(*configs(num_layers), STOCK.replace(**recipe))


def test_counts_are_positive_and_grow_by_a_fixed_amount_per_layer_group():
    # from 8 layers on, the drafter's five captured layers are distinct (at 4 two coincide, and
    # each captured layer costs one add: the residual stream h + delta)
    four, eight, twelve, sixteen = counts(4), counts(8), counts(12), counts(16)
    assert set(four) == {"ar", "draft", "verify", "commit"} and min(four.values()) > 0
    for phase in ("ar", "verify", "commit"):  # 3 Gated DeltaNet + 1 attention layer per group
        assert eight[phase] > four[phase]
        assert sixteen[phase] - twelve[phase] == twelve[phase] - eight[phase]
    assert eight["draft"] == four["draft"]  # the drafter does not depend on the target's depth


def test_snapshot_verify_runs_one_fla_kernel_per_token_and_replay_commit_reruns_it():
    snapshot, replay = counts(8, gdn_rollback="snapshot"), counts(8, gdn_rollback="replay")
    num_gdn, block = 6, 8
    # dispatch._fla keeps snapshots with one fused step per token, then a cat and a stack
    assert snapshot["verify"] - replay["verify"] == num_gdn * (block + 1)
    assert replay["commit"] > snapshot["commit"] + num_gdn  # the recurrence re-run per layer
    assert snapshot["draft"] == replay["draft"] and snapshot["ar"] == replay["ar"]


def test_fusion_and_graphs_change_the_counts_as_the_cuda_engine_does():
    fused, eager = counts(4), counts(4, fused_elementwise=False)
    assert all(eager[p] > fused[p] for p in ("ar", "draft", "verify"))  # norms: 1 kernel vs ~6
    no_graphs = counts(4, cuda_graphs=False)
    # graphs copy the two step inputs; the captured AR step also picks and feeds back its token
    assert all(fused[p] - no_graphs[p] == GRAPH_INPUT_COPIES for p in fused if p != "ar")
    assert fused["ar"] - no_graphs["ar"] == GRAPH_INPUT_COPIES + AR_GRAPH_SELF_FEED


def test_prediction_adds_the_fixed_cost_to_the_calibrated_floor():
    # AR: 10 ms floor and 3 ms fixed cost, so 13.5 ms leaves 10.5 ms of traffic
    efficiency = bandwidth_efficiency(10.0, 13.5, 3.0)
    assert efficiency == pytest.approx(1.05)
    assert predicted_ms(2.0, efficiency, 1.2) == pytest.approx(2.0 * 1.05 + 1.2)
    assert bandwidth_efficiency(10.0, 12.0, 3.0) == 1.0  # clamped: never above the ceiling
    assert bandwidth_efficiency(10.0, 14.0) == pytest.approx(1.4)  # no fixed cost: AR / floor


@pytest.fixture(scope="module")
def setting():
    from specpilot.settings import load_setting

    return load_setting("h200_c1_qwen38-27b_dflash2")


MEASURED = {"state": "ok", "ar_ms_per_step": 16.0, "launch_us": 3.0,
            "phases_ms": {"draft": 2.9, "verify": 20.0, "accept": 0.2, "commit": 1.3}}


def test_gap_rows_use_the_measured_launch_cost(setting, monkeypatch):
    from specpilot.search import gaps

    fake = {"ar": 1400, "draft": 470, "verify": 2000, "commit": 240}
    monkeypatch.setattr(gaps, "kernel_counts", lambda target, drafter, recipe: fake)
    rows = {r["phase"]: r for r in gaps.gap_rows(setting, {}, MEASURED, STOCK)}
    assert set(rows) == {"draft", "verify", "commit"}
    floors = {p: r["floor_ms"] for p, r in rows.items()}
    ar_floor = engine_costs(*model_configs(setting), GPUS["h200"], 8)["ar"].floor_ms
    efficiency = max(1.0, (16.0 - 1400 * 3e-3) / ar_floor)
    for phase, row in rows.items():
        assert row["num_kernels"] == fake[phase]
        assert row["launch_ms"] == pytest.approx(fake[phase] * 3e-3)
        assert row["fixed_ms"] == pytest.approx(row["launch_ms"])
        assert row["predicted_ms"] == pytest.approx(floors[phase] * efficiency + row["launch_ms"])
        assert row["prediction_error"] == pytest.approx(
            (row["predicted_ms"] - row["measured_ms"]) / row["measured_ms"])


def test_gap_rows_without_a_launch_cost_scale_the_floor_by_ar(setting, monkeypatch):
    from specpilot.search import gaps

    monkeypatch.setattr(gaps, "kernel_counts", lambda *a: pytest.fail("nothing to count"))
    assert GPUS["h200"].launch_us is None  # not measured yet: the worker's measurement decides
    rows = gaps.gap_rows(setting, {}, {**MEASURED, "launch_us": None}, STOCK)
    efficiency = rows[0]["bw_efficiency"]
    for row in rows:
        assert row["num_kernels"] is None and row["launch_ms"] is None and row["fixed_ms"] is None
        assert row["predicted_ms"] == pytest.approx(row["floor_ms"] * efficiency)


def test_gap_rows_prefer_the_measured_fixed_cost(setting, monkeypatch):
    from specpilot.search import gaps

    fake = {"ar": 1400, "draft": 470, "verify": 2000, "commit": 240}
    monkeypatch.setattr(gaps, "kernel_counts", lambda target, drafter, recipe: fake)
    fixed = {"ar": 3.5, "draft": 1.1, "verify": 5.0, "accept": 0.1, "commit": 0.8}
    rows = {r["phase"]: r for r in gaps.gap_rows(setting, {}, {**MEASURED, "fixed_ms": fixed},
                                                 STOCK)}
    ar_floor = engine_costs(*model_configs(setting), GPUS["h200"], 8)["ar"].floor_ms
    efficiency = max(1.0, (16.0 - 3.5) / ar_floor)
    for phase, row in rows.items():
        assert row["fixed_ms"] == fixed[phase] and row["num_kernels"] == fake[phase]
        assert row["bw_efficiency"] == pytest.approx(efficiency)
        assert row["predicted_ms"] == pytest.approx(row["floor_ms"] * efficiency + fixed[phase])


def test_fixed_cost_probe_runs_the_recipes_phases_on_shrunk_models():
    from specpilot.costmodel.fixed import measure_fixed_ms

    fixed = measure_fixed_ms(*configs(4), STOCK, "cpu", max_new_tokens=6, repeats=1)
    assert set(fixed) == {"ar", "draft", "verify", "accept", "commit"}
    assert all(ms > 0 for ms in fixed.values())
    ar_only = measure_fixed_ms(configs(4)[0], None, STOCK, "cpu", max_new_tokens=3, repeats=1)
    assert set(ar_only) == {"ar"}


def test_launch_probe_needs_a_gpu():
    assert measure_launch_us("cpu") is None
