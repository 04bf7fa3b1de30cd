"""A batch scenario judges a candidate by throughput under continuous batching at the setting's
concurrency (after token forcing), not by one request's ms/token."""

from specpilot.recipe import STOCK
from specpilot.workers.evaluate import run_job


def job(recipe, setting="cpu_c4_tiny"):
    return {"kind": "candidate", "setting": setting, "recipe": recipe.to_dict(),
            "champion": STOCK.to_dict(), "seed": 0,
            "validation": {"num_prompts": 2, "max_new_tokens": 12},
            "bench": {"num_prompts": 2, "max_new_tokens": 12, "max_rounds": 3}}


def test_a_batch_scenario_compares_throughput_at_its_concurrency():
    result = run_job(job(STOCK.replace(name="narrow", block_size=4)))
    assert result["state"] == "ok", result.get("error")
    compare = result["compare"]
    assert compare["scenario"] == "c4" and compare["num_rounds"] == 3
    assert len(compare["ratios"]) == 3  # one throughput ratio per interleaved repetition
    lo, hi = compare["ci95"]
    assert lo <= compare["median_speedup"] <= hi and compare["tok_s"] > 0
    assert compare["champion_tok_s"] > 0 and compare["p99_latency_s"] > 0
    assert result["phases_ms"]["verify"] > 0


def test_a_candidate_the_batched_engine_cannot_run_is_a_recorded_error():
    result = run_job(job(STOCK.replace(name="budgeted-two-stage", verify_budget="sps",
                                       sps_table=((1, 100.0), (8, 60.0)),
                                       two_stage=((2, 8, 3),))))
    assert result["state"] == "error" and "does not combine with two_stage" in result["error"]


def test_one_request_keeps_the_per_prompt_comparison():
    result = run_job(job(STOCK.replace(name="narrow", block_size=4), setting="cpu_c1_tiny"))
    assert result["state"] == "ok" and "scenario" not in result["compare"]
    assert result["compare"]["ms_per_token"] > 0
