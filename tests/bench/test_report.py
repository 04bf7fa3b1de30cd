"""``specpilot report`` renders README tables from records; ``--check`` catches a stale README."""

import json
import os
import shutil

import pytest

README = ("# Project\n\nIntro.\n\n## Results\n\n<!-- results:begin -->\nold\n"
          "<!-- results:end -->\n\nEnd.\n")


@pytest.fixture(scope="module")
def committed(saved_benches, specpilot_cli, tmp_path_factory):
    """A folder like experiments/results: bench, compare and score records plus a foreign JSON."""
    folder = tmp_path_factory.mktemp("committed")
    store_dir = tmp_path_factory.mktemp("store")
    for path in saved_benches.values():
        shutil.copy(path, folder / path.name)
    assert specpilot_cli("compare", "speed", saved_benches["ar"], saved_benches["stock"],
                         "--json", folder / "compare-ar-stock.json",
                         "--results-dir", store_dir) == 0
    assert specpilot_cli("score", "cpu_c1_tiny", "--dataset", "gsm8k", "--limit", "1",
                         "--max-new-tokens", "8", "--json", folder / "score-gsm8k.json",
                         "--results-dir", store_dir) == 0
    (folder / "one-off-experiment.json").write_text(json.dumps({"started": 1.0}))
    return folder


def test_report_renders_every_kind(committed, specpilot_cli, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert specpilot_cli("report", "--results-dir", committed, "--readme", readme) == 0
    text = readme.read_text()
    assert text.startswith("# Project\n\nIntro.")
    assert text.endswith("<!-- results:end -->\n\nEnd.\n")
    assert "\nold\n" not in text
    bench = json.loads((committed / "bench-cpu_c1_tiny-stock.json").read_text())
    compare = json.loads((committed / "compare-ar-stock.json").read_text())
    score = json.loads((committed / "score-gsm8k.json").read_text())
    assert f"{bench['summary']['tok_s']:.3g}" in text
    assert f"**{compare['median_speedup']:.3g}**" in text
    assert f"{score['num_correct']}/{score['num_examples']}" in text
    relative = os.path.relpath(committed / "compare-ar-stock.json", tmp_path)
    assert f"[compare-ar-stock.json]({relative})" in text  # links relative to the README
    assert "| saved runs | saved_runs |" in text
    assert "Not rendered (no bench/compare/score/batched_compare `kind`): `one-off-experiment.json`" in text


def test_check_passes_when_fresh_and_fails_when_stale(committed, specpilot_cli, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert specpilot_cli("report", "--results-dir", committed, "--readme", readme, "--check") == 1
    assert "stale" in capsys.readouterr().out
    assert readme.read_text() == README  # --check writes nothing
    assert specpilot_cli("report", "--results-dir", committed, "--readme", readme) == 0
    assert specpilot_cli("report", "--results-dir", committed, "--readme", readme, "--check") == 0
    readme.write_text(readme.read_text().replace("| stock |", "| typed-by-hand |", 1))
    assert specpilot_cli("report", "--results-dir", committed, "--readme", readme, "--check") == 1


def test_readme_without_markers_is_a_clear_error(committed, specpilot_cli, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    assert specpilot_cli("report", "--results-dir", committed, "--readme", readme) == 2
    assert "<!-- results:begin -->" in capsys.readouterr().err


def test_a_superseded_record_leaves_the_tables(committed, specpilot_cli, tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(committed, folder)
    compare = json.loads((folder / "compare-ar-stock.json").read_text())
    (folder / "compare-ar-stock.json").write_text(
        json.dumps({**compare, "superseded_by": "compare-ar-stock-v2.json"}))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert specpilot_cli("report", "--results-dir", folder, "--readme", readme) == 0
    text = readme.read_text()
    assert f"**{compare['median_speedup']:.3g}**" not in text
    assert ("Superseded, not rendered: `compare-ar-stock.json` (by `compare-ar-stock-v2.json`)"
            in text)
