"""``specpilot score`` end to end on cpu_c1_tiny for every dataset (the tiny model's answers are
mostly wrong; what is checked is that each is generated, judged and recorded)."""

import json

import pytest

from specpilot import cli
from specpilot.bench import store

STATUSES = {"correct", "wrong", "no_answer", "passed", "failed", "timeout", "killed"}


@pytest.mark.parametrize("dataset", ["gsm8k", "math500", "humaneval", "mbpp"])
def test_score_runs_end_to_end(dataset, tmp_path, capsys):
    out = tmp_path / "score.json"
    assert cli.main(["score", "cpu_c1_tiny", "--dataset", dataset, "--limit", "2",
                     "--max-new-tokens", "8", "--timeout-s", "3", "--json", str(out),
                     "--results-dir", str(tmp_path / "results")]) == 0
    assert f"--dataset {dataset}: " in capsys.readouterr().out
    record = json.loads(out.read_text())
    assert (record["kind"], record["dataset"], record["engine"]) == ("score", dataset, "stock")
    assert record["num_examples"] == len(record["examples"]) == 2
    assert record["num_correct"] == sum(e["correct"] for e in record["examples"])
    assert record["accuracy"] == record["num_correct"] / 2
    for example in record["examples"]:
        assert example["status"] in STATUSES and 1 <= example["num_tokens"] <= 8
    [row] = store.read_table(tmp_path / "results", kind="score").to_pylist()
    assert row["accuracy"] == record["accuracy"] and row["run_id"] == record["run_id"]


def test_unknown_dataset_is_rejected(capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", "cpu_c1_tiny", "--dataset", "nope"])
    assert "invalid choice" in capsys.readouterr().err
