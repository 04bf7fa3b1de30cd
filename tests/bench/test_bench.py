"""``specpilot bench`` end to end on cpu_c1_tiny: the record, the store row, the plots."""

import json
import shutil

import pytest

from specpilot import settings
from specpilot.bench import store


def test_bench_record_schema(saved_benches):
    record = json.loads(saved_benches["stock"].read_text())
    for key in ("kind", "setting", "engine", "recipe", "recipe_hash", "setting_hash",
                "fingerprint", "scenario", "prompts", "per_prompt", "summary", "acceptance"):
        assert key in record, key
    assert (record["kind"], record["engine"], record["scenario"]) == ("bench", "stock", "c1")
    assert record["acceptance"] == "measured"
    assert set(record["fingerprint"]) >= {"gpu", "compute_capability", "driver", "cuda", "torch",
                                          "triton", "commit"}
    assert record["prompts"]["num_prompts"] == len(record["per_prompt"]) == 2
    for prompt in record["per_prompt"]:
        assert prompt["tokens"] == 10  # ignore_eos: every prompt gets max_new_tokens
        assert sum(prompt["accept_lengths"]) == prompt["tokens"] - 1  # the first is from prefill
        assert prompt["ms_per_token"] == pytest.approx(prompt["decode_s"] * 1e3 / 9)
    summary = record["summary"]
    assert summary["ms_per_token"]["p20"] <= summary["ms_per_token"]["median"] \
        <= summary["ms_per_token"]["p80"]
    steps = [n for p in record["per_prompt"] for n in p["accept_lengths"]]
    assert summary["tau"] == pytest.approx(sum(steps) / len(steps))
    assert sum(summary["tau_histogram"].values()) == len(steps)
    phases = summary["phases"]
    assert phases["measured"] is True and phases["clock"] == "host"
    assert set(phases["ms_per_step"]) >= {"draft", "verify", "accept", "commit", "overhead"}
    assert all(v >= 0 for v in phases["ms_per_step"].values())
    assert phases["ms_per_step"]["verify"] > 0


def test_bench_is_stored_with_plots(saved_benches, results_dir):
    record = json.loads(saved_benches["stock"].read_text())
    rows = {r["run_id"]: r for r in store.read_table(results_dir, kind="bench").to_pylist()}
    row = rows[record["run_id"]]
    assert row["tau"] == pytest.approx(record["summary"]["tau"])
    assert row["gpu"] == record["fingerprint"]["gpu"]
    assert row["recipe_hash"] == record["recipe_hash"]
    assert json.loads(row["metrics_json"])["per_prompt"] == record["per_prompt"]
    assert sorted(p.rsplit("/", 1)[-1] for p in record["plots"]) == ["phases.png",
                                                                     "tau_histogram.png"]
    with open(record["plots"][0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_batched_bench_at_each_concurrency(specpilot_cli, tmp_path):
    out = tmp_path / "batched.json"
    assert specpilot_cli("bench", "cpu_c1_tiny", "--engine", "stock", "--scenario", "cN",
                         "--max-concurrency", "2", "--num-prompts", "3", "--max-new-tokens", "8",
                         "--json", out, "--results-dir", tmp_path / "results") == 0
    record = json.loads(out.read_text())
    assert record["scenario"] == "cN"
    assert [level["concurrency"] for level in record["levels"]] == [1, 2]
    for level in record["levels"]:
        assert level["num_tokens"] == 3 * 8  # every request ran to max_new_tokens
        assert level["output_tok_s"] == pytest.approx(level["num_tokens"] / level["wall_s"])
        latency = level["request_latency_s"]
        assert 0 < latency["p20"] <= latency["median"] <= latency["p80"]
        assert level["ttft_ms"]["median"] > 0
    assert [p["tokens"] for p in record["per_prompt"]] == [8, 8, 8]
    assert record["summary"]["tau"] == pytest.approx(record["levels"][0]["tau"])
    assert sorted(p.rsplit("/", 1)[1] for p in record["plots"]) == ["concurrency.png",
                                                                   "tau_histogram.png"]


@pytest.fixture
def replay_setting(tmp_path, monkeypatch):
    """A copy of cpu_c1_tiny on the generated random pair (whose drafter alone accepts nothing)
    whose scenario replays acceptance from a profile (tau 3)."""
    source = settings.SETTINGS_DIR / "cpu_c1_tiny"
    target = tmp_path / "cpu_c1_tiny_replay"
    shutil.copytree(source, target)
    text = (target / "setting.toml").read_text().replace('name = "cpu_c1_tiny"',
                                                         'name = "cpu_c1_tiny_replay"')
    text = text.replace('"bundled:tiny-trained-qwen3_5"', '"generated:tiny-qwen3_5"').replace(
        '"bundled:tiny-trained-dflash2"', '"generated:tiny-dflash2"')
    assert '"generated:tiny-dflash2"' in text
    text = text.replace("temperature = 0.0\n", 'temperature = 0.0\nacceptance_profile = "tau:3"\n',
                        1)
    (target / "setting.toml").write_text(text)
    monkeypatch.setattr(settings, "SETTINGS_DIR", tmp_path)
    return "cpu_c1_tiny_replay"


def test_bench_replays_the_setting_profile(replay_setting, specpilot_cli, tmp_path):
    out = tmp_path / "replay.json"
    assert specpilot_cli("bench", replay_setting, "--engine", "stock", "--num-prompts", "2",
                         "--max-new-tokens", "24", "--json", out,
                         "--results-dir", tmp_path / "results") == 0
    record = json.loads(out.read_text())
    assert record["acceptance"] == "replayed(tau:3)"
    # the tiny random drafter alone accepts nothing (tau 1); the replayed profile sets tau
    assert record["summary"]["tau"] > 1.5
    assert max(int(k) for k in record["summary"]["tau_histogram"]) > 1


def test_replayed_batched_bench(replay_setting, specpilot_cli, tmp_path):
    """Batched decoding replays the profile per request too (one verify forward for all rows)."""
    out = tmp_path / "replay-cN.json"
    assert specpilot_cli("bench", replay_setting, "--engine", "stock", "--scenario", "cN",
                         "--max-concurrency", "2", "--num-prompts", "2", "--max-new-tokens", "24",
                         "--json", out, "--results-dir", tmp_path / "results") == 0
    record = json.loads(out.read_text())
    assert record["acceptance"] == "replayed(tau:3)"
    assert [level["concurrency"] for level in record["levels"]] == [1, 2]
    assert record["summary"]["tau"] > 1.5


def test_batched_replay_references_equal_the_one_request_ones(replay_setting):
    """On a GPU the replay references come from the batched AR engine; they are the same greedy
    continuations (checked here on the CPU in fp32, where both paths run)."""
    from specpilot.bench.workload import replay_for
    from specpilot.bench.workload import workload_for
    from specpilot.build import load_models

    models = load_models(settings.load_setting(replay_setting))
    workload = workload_for(models.setting, models.tokenizer, num_prompts=5, max_new_tokens=12)
    done = []
    batched = replay_for(models, workload, batched=True, progress=lambda: done.append(1))
    alone = replay_for(models, workload, batched=False)
    assert batched.references == alone.references and len(done) == 5
