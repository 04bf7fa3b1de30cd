"""The cost model's floors follow from the model shapes, and the gap table ranks phases by excess."""

import json
from pathlib import Path

import pytest

from specpilot.costmodel import GPUS
from specpilot.costmodel import engine_costs
from specpilot.costmodel import gap_table
from specpilot.costmodel import speedup_bound

ROOT = Path(__file__).resolve().parents[2]
SETTING = ROOT / "settings" / "h200_c1_qwen38-27b_dflash2"


@pytest.fixture(scope="module")
def costs():
    target = json.loads((SETTING / "target_config.json").read_text())
    drafter = json.loads((SETTING / "drafter_config.json").read_text())
    return engine_costs(target, drafter, GPUS["h200"], block_size=8, context=256)


def test_ar_floor_is_the_weight_read(costs):
    # Qwen3.8-27B text decoder: 26.896 B parameters; the step reads all but the embedding table
    # (one row per token): (26.896e9 - 248320 * 5120) * 2 B, plus KV and recurrent state
    weights = (26.896e9 - 248320 * 5120) * 2
    assert costs["ar"].bytes == pytest.approx(weights, rel=0.03)
    assert costs["ar"].floor_ms == pytest.approx(costs["ar"].bytes / 4.58e12 * 1e3)


def test_phase_floors_are_ordered(costs):
    assert costs["verify"].floor_ms > costs["ar"].floor_ms  # 8 rows: same weights + more state
    assert costs["verify"].floor_ms < 1.1 * costs["ar"].floor_ms  # still memory-bound at M = 8
    # drafter (1.92 B parameters) + the target lm_head again for the proposals
    assert 1.5e9 * 2 < costs["draft"].bytes < 2.2e9 * 2 + 248320 * 5120 * 2
    # 48 GDN layers: fp32 state [48, 128, 128] and bf16 conv state [10240, 3] read and written;
    # 16 target + 5 drafter attention layers: int64 slot positions (256 + 8 slots) read and written
    state, conv, positions = 48 * 128 * 128 * 4, 10240 * 3 * 2, (256 + 8) * 8
    assert costs["commit"].bytes == pytest.approx(48 * 2 * (state + conv) + 21 * 2 * positions)


def test_replay_commit_reads_the_pending_rows():
    target = json.loads((SETTING / "target_config.json").read_text())
    drafter = json.loads((SETTING / "drafter_config.json").read_text())
    snapshot, replay = (engine_costs(target, drafter, GPUS["h200"], 8, 256, rollback)["commit"]
                        for rollback in ("snapshot", "replay"))
    # per GDN layer and row: q, k, v (10240 bf16 conv channels), fp32 g and bf16 beta per v head
    assert replay.bytes - snapshot.bytes == pytest.approx(48 * 8 * (10240 * 2 + 48 * 6))


def test_the_drafter_context_fusion_is_read_in_verify(costs):
    # commit_context runs fc [5120, ids * 5120] on the verified rows (verify), never in draft
    target = json.loads((SETTING / "target_config.json").read_text())
    drafter = json.loads((SETTING / "drafter_config.json").read_text())
    drafter["dflash_config"] = {**drafter["dflash_config"], "target_layer_ids": [5, 19]}
    fewer = engine_costs(target, drafter, GPUS["h200"], block_size=8, context=256)
    dropped = 3 * 5120  # fc input features
    assert costs["draft"].bytes == fewer["draft"].bytes
    assert costs["verify"].bytes - fewer["verify"].bytes == 5120 * dropped * 2 + 2 * 8 * dropped


def test_speedup_bound(costs):
    step = costs["draft"].floor_ms + costs["verify"].floor_ms + costs["commit"].floor_ms
    assert speedup_bound(costs, 3.5) == pytest.approx(3.5 * costs["ar"].floor_ms / step)
    assert 2.0 < speedup_bound(costs, 3.5) < 3.5


def test_gap_table_ranks_by_excess(costs):
    measured = {"ar": 15.4, "verify": 19.2, "draft": 2.6, "commit": 1.0}
    rows = gap_table(costs, measured)
    excess = [r["excess_ms"] for r in rows]
    assert excess == sorted(excess, reverse=True) and rows[0]["phase"] == "verify"
    assert all(r["gap"] == pytest.approx(r["measured_ms"] / r["floor_ms"]) for r in rows)


def test_ceilings_say_where_they_come_from():
    assert GPUS["h200"].source.startswith("measured")
    assert all(g.source.startswith("datasheet") for k, g in GPUS.items() if k not in ("h200", "cpu"))
    assert GPUS["cpu"].source.startswith("nominal")
    # a per-kernel launch cost is only ever a measured one
    assert all(g.launch_us is None for g in GPUS.values() if "launch_us not measured" in g.source)
    assert all(g.launch_us is None for g in GPUS.values() if not g.source.startswith("measured"))


def test_cli_prints_floors_bound_and_gap_table(tmp_path, capsys):
    from specpilot import cli

    record = tmp_path / "bench.json"
    record.write_text(json.dumps({"summary": {"phases": {
        "measured": True, "ms_per_step": {"draft": 2.6, "verify": 19.2, "commit": 1.0}}}}))
    assert cli.main(["costmodel", "h200_c1_qwen38-27b_dflash2", "--measured", str(record)]) == 0
    out = capsys.readouterr().out
    assert "speedup bound at tau 3.5" in out
    tree = next(line for line in out.splitlines() if "tree verify (tau:3.5" in line)
    assert "upper bound, 16 nodes on 4 paths" in tree and tree.endswith("does not pay)")
    gap_lines = [line.split()[0] for line in out.split("gap table")[1].splitlines()[1:]]
    assert gap_lines == ["verify", "draft", "commit"]


def test_cli_refuses_a_gpu_without_ceilings(capsys):
    from specpilot import cli

    assert cli.main(["costmodel", "cpu_c1_tiny", "--gpu", "a100"]) == 2
    assert "no ceilings for gpu 'a100'" in capsys.readouterr().err
