"""``specpilot compare speed`` end to end: interleaved on cpu_c1_tiny, and from two saved runs."""

import json

import pytest

from specpilot.bench import compare_saved
from specpilot.bench import store
from specpilot.errors import SpecPilotError


def _check_compare_record(record: dict):
    for key in ("a", "b", "pairs", "ratios", "median_speedup", "ci95", "half_width",
                "stop_reason", "fingerprint", "setting_hash", "speedup_definition"):
        assert key in record, key
    assert (record["a"]["engine"], record["b"]["engine"]) == ("ar", "stock")
    assert record["ratios"] == [p["ratio"] for p in record["pairs"]]
    for pair in record["pairs"]:
        assert pair["ratio"] == pytest.approx(pair["a_ms_per_token"] / pair["b_ms_per_token"])
    lo, hi = record["ci95"]
    assert lo <= record["median_speedup"] <= hi
    assert record["half_width"] == pytest.approx((hi - lo) / 2)
    assert "B is faster" in record["speedup_definition"]


def test_interleaved_compare(specpilot_cli, tiny_args, tmp_path, capsys):
    out = tmp_path / "compare.json"
    # a half-width target nothing misses: the rule must stop right after min_rounds
    assert specpilot_cli("compare", "speed", "cpu_c1_tiny", "--a", "ar", "--b", "stock",
                         *tiny_args, "--target-half-width", "100", "--min-rounds", "2",
                         "--max-rounds", "5", "--json", out,
                         "--results-dir", tmp_path / "results") == 0
    assert "A time / B time; > 1: B is faster" in capsys.readouterr().out
    record = json.loads(out.read_text())
    _check_compare_record(record)
    assert (record["stop_reason"], record["num_rounds"]) == ("ci_target", 2)
    assert len(record["pairs"]) == 4
    # ABAB: the order alternates by prompt and flips every round
    assert [p["order"] for p in record["pairs"]] == ["AB", "BA", "BA", "AB"]
    assert set(record["warmup_s"]) == {"a", "b"}
    assert store.read(tmp_path / "results", kind="compare")[0]["run_id"] == record["run_id"]
    assert record["plots"][0].endswith("speedup.png")


def test_compare_stops_at_the_time_budget(specpilot_cli, tiny_args, tmp_path):
    out = tmp_path / "compare.json"
    assert specpilot_cli("compare", "speed", "cpu_c1_tiny", "--a", "ar", "--b", "stock",
                         *tiny_args, "--time-budget-s", "0.001", "--no-warmup", "--json", out,
                         "--results-dir", tmp_path / "results") == 0
    record = json.loads(out.read_text())
    assert (record["stop_reason"], len(record["pairs"])) == ("time_budget", 1)


def test_compare_two_saved_runs(specpilot_cli, saved_benches, tmp_path):
    out = tmp_path / "saved.json"
    assert specpilot_cli("compare", "speed", saved_benches["ar"], saved_benches["stock"],
                         "--json", out, "--results-dir", tmp_path / "results") == 0
    record = json.loads(out.read_text())
    _check_compare_record(record)
    assert record["stop_reason"] == "saved_runs" and record["interleaved"] is False
    assert record["same_device"] is True
    assert [p["prompt_index"] for p in record["pairs"]] == [0, 1]


def test_saved_runs_of_different_prompts_are_refused(saved_benches):
    a = json.loads(saved_benches["ar"].read_text())
    b = json.loads(saved_benches["stock"].read_text())
    b["prompts"]["hash"] = "0" * 16
    with pytest.raises(SpecPilotError, match="different prompts"):
        compare_saved(a, b)


def test_setting_form_needs_both_engines(specpilot_cli, capsys):
    with pytest.raises(SystemExit):
        specpilot_cli("compare", "speed", "cpu_c1_tiny", "--a", "ar")
    assert "needs --a and --b" in capsys.readouterr().err
