"""The confidence budget's steps/s table, measured with the engine that will use it
(``specpilot sps-table``): one timed entry per (bucket, width) the budget may verify, kept with its
bucket, and a recipe that runs the budget with it."""

import json
import shutil

import pytest

from specpilot.bench.sps import budget_recipe
from specpilot.bench.sps import measure_sps_table
from specpilot.build import load_models
from specpilot.engines.decode.budget import steps_per_second
from specpilot.engines.batch import BatchEngine
from specpilot.errors import SpecPilotError
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.recipe import Recipe
from specpilot.settings import load_setting


def test_every_width_of_every_bucket_is_timed():
    models = load_models(load_setting("cpu_c1_tiny-muse"))
    measured = measure_sps_table(models, STOCK, 3, rounds=2, steps=1, prompt_tokens=8,
                                 log=lambda m: None)
    batch = BatchEngine(models.engine(STOCK.replace(verify_budget="sps", sps_table=((1, 1.0),))),
                        3)
    expected = {(b, w) for b in batch.buckets for w in batch.budget_widths(b)}
    samples = measured["samples"]
    assert {(s["bucket"], s["width"]) for s in samples} == expected
    for s in samples:
        assert s["tokens"] == s["bucket"] * s["width"]
        assert 0 < s["spread"][0] <= s["steps_per_s"] <= s["spread"][1]
    # every point with its bucket: the budget prices a bucket's widths by its own points
    recipe = budget_recipe(STOCK.replace(overlap_schedule=True), measured["sps_table"])
    assert recipe.verify_budget == "sps" and not recipe.overlap_schedule  # which it excludes
    for s in samples:
        assert steps_per_second(recipe.sps_table, s["tokens"], s["bucket"]) == pytest.approx(
            s["steps_per_s"])


def test_an_ar_recipe_or_a_short_engine_is_refused():
    models = load_models(load_setting("cpu_c1_tiny-muse"))
    with pytest.raises(SpecPilotError, match="speculative recipe"):
        measure_sps_table(models, AR, 2)
    with pytest.raises(SpecPilotError, match="lower --steps"):
        measure_sps_table(models, STOCK, 2, steps=400, log=lambda m: None)


def test_the_command_writes_a_budget_recipe(tmp_path, monkeypatch):
    """``specpilot sps-table`` writes ``recipes/NAME.json`` (the engine's recipe with the budget
    and the measured table) and its record; the recipe builds a budgeted batch engine."""
    from specpilot import cli
    from specpilot import settings

    shutil.copytree(settings.SETTINGS_DIR / "cpu_c4_tiny", tmp_path / "cpu_c4_tiny")
    monkeypatch.setattr(settings, "SETTINGS_DIR", tmp_path)
    record = tmp_path / "sps.json"
    assert cli.main(["sps-table", "cpu_c4_tiny", "--concurrency", "2", "--rounds", "1",
                     "--steps", "1", "--json", str(record)]) == 0
    recipe = Recipe.from_json(tmp_path / "cpu_c4_tiny" / "recipes" / "stock-budget.json")
    data = json.loads(record.read_text())
    assert recipe.verify_budget == "sps" and recipe.name == "stock-budget"
    assert [list(p) for p in recipe.sps_table] == data["sps_table"]
    assert data["kind"] == "sps_table" and data["max_batch"] == 2 and data["fingerprint"]
    models = load_models(load_setting("cpu_c4_tiny"))
    assert BatchEngine(models.engine(recipe), 2)._budget


def test_a_base_with_overlap_or_two_stages_gets_a_valid_budget_recipe(tmp_path, monkeypatch):
    """The budget excludes overlapped scheduling and two stages: the engine measured and the
    recipe written both leave them off, so a catalog base like stock+overlap-schedule works."""
    from specpilot import cli
    from specpilot import settings

    shutil.copytree(settings.SETTINGS_DIR / "cpu_c4_tiny", tmp_path / "cpu_c4_tiny")
    monkeypatch.setattr(settings, "SETTINGS_DIR", tmp_path)
    (tmp_path / "cpu_c4_tiny" / "recipes").mkdir()
    (tmp_path / "cpu_c4_tiny" / "recipes" / "ov.json").write_text(json.dumps(
        STOCK.replace(name="ov", overlap_schedule=True).to_dict()))
    assert cli.main(["sps-table", "cpu_c4_tiny", "--engine", "ov", "--concurrency", "1",
                     "--rounds", "1", "--steps", "1"]) == 0
    recipe = Recipe.from_json(tmp_path / "cpu_c4_tiny" / "recipes" / "ov-budget.json")
    assert recipe.verify_budget == "sps" and not recipe.overlap_schedule and not recipe.two_stage
    with pytest.raises(SpecPilotError, match="positive finite"):
        STOCK.replace(verify_budget="sps", sps_table=((1, 8, float("nan")),))
