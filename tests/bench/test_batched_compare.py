"""Side-by-side throughput under continuous batching: a record per setting that the report renders."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "h200_batched.py"


def test_batched_compare_record_is_rendered(tmp_path, monkeypatch, specpilot_cli):
    spec = importlib.util.spec_from_file_location("h200_batched", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", tmp_path / "results")
    script.main(["--settings", "cpu_c1_tiny", "--levels", "1,2", "--repeats", "2",
                 "--max-new-tokens", "6"])
    record = json.loads((tmp_path / "results" / "batched-cpu_c1_tiny.json").read_text())
    assert record["kind"] == "batched_compare" and record["acceptance"] == "measured"
    assert [level["concurrency"] for level in record["levels"]] == [1, 2]
    for level in record["levels"]:
        assert len(level["ratios"]) == 2 and level["ci95"][0] <= level["median_ratio"]
        assert level["median_ratio"] > 0 and level["b_tau"] >= 1.0
        for run in level["runs"]["a"] + level["runs"]["b"]:  # prefill and decode apart
            assert run["ttft_ms"] > 0 and run["itl_ms"] > 0
            # the timed run's own decode steps and prefill rounds (the warm-up waves excluded):
            # every prompt joined in some round, and no more rounds than prompts
            assert run["steps"] >= 1 and 1 <= run["admissions"] <= level["num_prompts"]
            split = run["wall_split_s"]  # the wall time: steps, prefill rounds and the rest
            assert 0 < split["steps"] < run["wall_s"] and 0 < split["admissions"] < run["wall_s"]
            assert split["other"] >= 0  # steps and prefill rounds never overlap in the loop
        # the decode wall alone (admissions left out), a over b per repetition
        decode = [sum(a["wall_split_s"][k] for k in ("steps", "other"))
                  / sum(b["wall_split_s"][k] for k in ("steps", "other"))
                  for a, b in zip(level["runs"]["a"], level["runs"]["b"])]
        assert level["decode_ratios"] == pytest.approx(decode)
        assert level["decode_ci95"][0] <= level["decode_median_ratio"] <= level["decode_ci95"][1]
    readme = tmp_path / "README.md"
    readme.write_text("# P\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    assert specpilot_cli("report", "--results-dir", tmp_path / "results", "--readme", readme) == 0
    text = readme.read_text()
    assert "Throughput A/B under continuous batching" in text
    assert f"**{record['levels'][1]['median_ratio']:.3g}**" in text


def test_a_level_that_does_not_fit_is_recorded_and_rendered(tmp_path, monkeypatch, specpilot_cli):
    from specpilot.engines import batch
    from specpilot.errors import SpecPilotError

    spec = importlib.util.spec_from_file_location("h200_batched", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", tmp_path / "results")
    real = batch.BatchEngine

    def engine_or_no_memory(engine, max_batch, *args, **kwargs):
        if max_batch == 2:
            raise SpecPilotError("recipe 'stock': a batch of 2 rows of 2048 tokens does not fit")
        return real(engine, max_batch, *args, **kwargs)

    monkeypatch.setattr(batch, "BatchEngine", engine_or_no_memory)
    script.main(["--settings", "cpu_c1_tiny", "--levels", "2,1", "--repeats", "2",
                 "--max-new-tokens", "4"])
    record = json.loads((tmp_path / "results" / "batched-cpu_c1_tiny.json").read_text())
    assert record["levels"][0] == {"concurrency": 2, "error": "recipe 'stock': a batch of 2 rows "
                                   "of 2048 tokens does not fit"}
    assert record["levels"][1]["concurrency"] == 1 and len(record["levels"][1]["ratios"]) == 2
    readme = tmp_path / "README.md"
    readme.write_text("# P\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    assert specpilot_cli("report", "--results-dir", tmp_path / "results", "--readme", readme) == 0
    assert "| 2 | not run: recipe 'stock': a batch of 2 rows of 2048 tokens does not fit |" in \
        readme.read_text()


def test_several_pairs_share_one_model_load(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("h200_batched", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", tmp_path)
    script.main(["--settings", "cpu_c1_tiny", "--levels", "2", "--repeats", "2",
                 "--max-new-tokens", "6", "--pairs",
                 "ar:stock,stock:stock+batched-prefill+grouped-admission"])
    first = json.loads((tmp_path / "batched-cpu_c1_tiny.json").read_text())
    second = json.loads((tmp_path / "batched-cpu_c1_tiny-1.json").read_text())
    assert (first["a"], first["b"]) == ("ar", "stock")
    assert (second["a"], second["b"]) == ("stock", "stock+batched-prefill+grouped-admission")
    assert second["levels"][0]["median_ratio"] > 0
    with pytest.raises(SystemExit):
        script.main(["--settings", "cpu_c1_tiny", "--pairs", "ar-stock"])


def test_a_budget_table_measured_on_the_load_is_a_recipe_the_pairs_name(tmp_path, monkeypatch):
    """``--sps-table stock:NAME`` measures the budget's table on the script's model load, writes
    recipe NAME into the setting (a copy here) and its record, and a pair may then name it."""
    import shutil

    from specpilot import settings

    shutil.copytree(settings.SETTINGS_DIR / "cpu_c1_tiny", tmp_path / "cpu_c1_tiny")
    monkeypatch.setattr(settings, "SETTINGS_DIR", tmp_path)
    spec = importlib.util.spec_from_file_location("h200_batched", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", tmp_path / "out")
    script.main(["--settings", "cpu_c1_tiny", "--levels", "2", "--repeats", "2",
                 "--max-new-tokens", "6", "--sps-table", "stock:t-budget",
                 "--pairs", "stock:t-budget"])
    table = json.loads((tmp_path / "out" / "sps-cpu_c1_tiny-t-budget.json").read_text())
    assert table["kind"] == "sps_table" and table["setting"] == "cpu_c1_tiny"
    assert table["max_batch"] == 2 and {p[0] for p in table["sps_table"]} == {1, 2}
    recipe = json.loads((tmp_path / "cpu_c1_tiny" / "recipes" / "t-budget.json").read_text())
    assert recipe["verify_budget"] == "sps" and recipe["sps_table"] == table["sps_table"]
    record = json.loads((tmp_path / "out" / "batched-cpu_c1_tiny.json").read_text())
    assert record["b"] == "t-budget" and record["levels"][0]["median_ratio"] > 0
    with pytest.raises(SystemExit):
        script.main(["--settings", "cpu_c1_tiny", "--sps-table", "stock"])
