"""Floors for several requests decoded together, and the two-stage verification term."""

import json
from pathlib import Path

import pytest

from specpilot.costmodel import GPUS
from specpilot.costmodel import engine_costs
from specpilot.costmodel import speedup_bound
from specpilot.costmodel.phases import deeper_drafting_bound
from specpilot.costmodel.phases import two_stage_verify_ms

SETTING = Path(__file__).resolve().parents[2] / "settings" / "h200_c1_qwen38-27b_dflash2"
TARGET = json.loads((SETTING / "target_config.json").read_text())
DRAFTER = json.loads((SETTING / "drafter_config.json").read_text())
H200 = GPUS["h200"]


def costs(num_requests: int):
    return engine_costs(TARGET, DRAFTER, H200, 8, context=256, num_requests=num_requests)


def test_weights_are_read_once_for_all_requests_and_the_rest_scales():
    one, two, four = costs(1), costs(2), costs(4)
    for phase in ("ar", "verify", "draft"):
        per_request = two[phase].bytes - one[phase].bytes
        assert 0 < per_request < 0.1 * one[phase].bytes  # weights dominate and are shared
        assert four[phase].bytes == pytest.approx(one[phase].bytes + 3 * per_request)
        assert four[phase].flops == pytest.approx(4 * one[phase].flops)
    assert four["commit"].bytes == pytest.approx(4 * one["commit"].bytes)


def test_verify_turns_compute_bound_and_the_bound_falls_with_concurrency():
    light, heavy = costs(1), costs(64)
    # 64 x 8 rows x 2 x 27 B parameters of FLOPs exceed the weight read at 770 TFLOP/s
    assert heavy["verify"].floor_ms == pytest.approx(heavy["verify"].flops / 770e12 * 1e3)
    assert light["verify"].floor_ms == pytest.approx(light["verify"].bytes / 4.58e12 * 1e3)
    bounds = [speedup_bound(costs(n), 3.5) for n in (1, 16, 32, 64)]
    assert bounds == sorted(bounds, reverse=True) and bounds[0] > 2.5 and bounds[-1] < 1.5


def test_two_stage_pays_only_when_the_verify_is_compute_bound():
    probs = [0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.05]  # accept lengths 1..8
    one_request = two_stage_verify_ms(TARGET, DRAFTER, H200, 8, 1, probs)
    assert one_request["speedup"] < 1.0  # weight-bound: a second pass reads every weight again
    many = two_stage_verify_ms(TARGET, DRAFTER, H200, 8, 256, probs)
    assert many["speedup"] > 1.1 and many["best_ms"] == min(many["by_prefix"].values())
    assert set(many["by_prefix"]) == set(range(1, 8))
    # everyone passes every prefix: stage 2 re-runs the same requests, so it can never pay
    certain = two_stage_verify_ms(TARGET, DRAFTER, H200, 8, 256, [0.0] * 7 + [1.0])
    assert certain["speedup"] <= 1.0 + 1e-9


def test_cli_prints_the_bound_and_the_two_stage_term_at_a_concurrency(capsys):
    from specpilot import cli

    assert cli.main(["costmodel", "h200_c1_qwen38-27b_dflash2", "--concurrency", "128"]) == 0
    out = capsys.readouterr().out
    assert "128 request(s) per step" in out
    assert "two-stage verify (tau:3.5): best prefix" in out
    assert "two-stage verify against verifying fewer positions: bound" in out
    assert "verify width (tau:3.5): best" in out
    assert "deeper drafting (tau:3.5; upper bound)" in out
    assert "tree verify" not in out  # a one-request term
    assert "verify width by occupancy (recipe verify_widths, rows >= N -> width): ((" in out
    assert "two-stage verify by occupancy (recipe two_stage" in out
    with pytest.raises(SystemExit) as exit_:
        cli.main(["costmodel", "h200_c1_qwen38-27b_dflash2", "--concurrency", "0"])
    assert exit_.value.code == 2 and "--concurrency must be >= 1" in capsys.readouterr().err


def test_truncated_tau_keeps_the_drafts_before_the_cut():
    from specpilot.costmodel.phases import truncated_tau

    probs = [0.5, 0.0, 0.0, 0.5]  # no draft accepted, or all three
    assert truncated_tau(probs, 4) == pytest.approx(2.5)
    assert truncated_tau(probs, 2) == pytest.approx(1.5)  # one row after the anchor: 1 draft


def test_fewer_verify_rows_win_only_once_the_batch_is_compute_bound():
    from specpilot.costmodel.phases import bound_by_width

    probs = [0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.05]
    alone = bound_by_width(TARGET, DRAFTER, H200, 8, 1, probs)
    assert max(alone, key=alone.get) == 8  # weight-bound: rows are nearly free
    assert alone[8] == pytest.approx(speedup_bound(costs_at(1), 1 + sum(
        k * p for k, p in enumerate(probs))), rel=0.02)
    crowded = bound_by_width(TARGET, DRAFTER, H200, 8, 128, probs)
    assert max(crowded, key=crowded.get) < 8


def costs_at(num_requests: int):
    return engine_costs(TARGET, DRAFTER, H200, 8, num_requests=num_requests)


def test_deeper_drafting_pays_only_when_blocks_are_usually_accepted_whole():
    """Deeper drafting's bound: a second drafter pass and twice the verify rows, repaid only by
    the steps whose first block was accepted whole. At the Qwen seed's tau 3.5 (one block in eight
    accepted whole) it loses; a drafter whose blocks almost always pass would gain."""
    from specpilot.engines.drafters.replay import AcceptanceProfile

    seed = AcceptanceProfile.parametric(3.5, 8).probs
    low = deeper_drafting_bound(TARGET, DRAFTER, H200, 8, 1, list(seed), context=256)
    assert low["p_full_block"] == pytest.approx(seed[-1])
    assert low["ratio"] < 1.0
    high = deeper_drafting_bound(TARGET, DRAFTER, H200, 8, 1, [0.0] * 7 + [1.0], context=256)
    assert high["p_full_block"] == 1.0 and high["ratio"] > 1.3


def test_tree_bound_prices_the_paths_recurrence_against_its_measured_gain():
    """Tree verification at one request: 16 verify rows cost about what 8 do (the weights
    dominate), but on the hybrid target every path runs the Gated-DeltaNet recurrence with its own
    per-row states. With the proxy's +4.7% tokens per step it does not pay on Qwen3.8-27B; with no
    gain it always loses; on an attention-only target (Muse) only the extra rows cost."""
    from specpilot.costmodel.phases import tree_verify_bound
    from specpilot.engines.drafters.replay import AcceptanceProfile

    probs = list(AcceptanceProfile.parametric(3.5, 8).probs)
    measured = tree_verify_bound(TARGET, DRAFTER, H200, 8, probs, 16, 4, context=256)
    assert measured["verify_ms"][1] > measured["verify_ms"][0] and measured["ratio"] < 1.0
    free = tree_verify_bound(TARGET, DRAFTER, H200, 8, probs, 16, 4, tau_gain=0.0, context=256)
    assert free["ratio"] < measured["ratio"]
    more_paths = tree_verify_bound(TARGET, DRAFTER, H200, 8, probs, 16, 8, context=256)
    assert more_paths["verify_ms"][1] > measured["verify_ms"][1]
    muse = Path(__file__).resolve().parents[2] / "settings" / "h200_c1_muse-glimmer-30b_dflash2"
    configs = [json.loads((muse / f).read_text()) for f in ("target_config.json",
                                                             "drafter_config.json")]
    attention_only = tree_verify_bound(*configs, H200, 16, list(
        AcceptanceProfile.parametric(6.0, 16).probs), 32, 4, context=256)
    assert 1.0 < attention_only["ratio"] < 1.047  # the gain, less the extra rows


def test_two_stage_competes_with_fewer_verify_rows():
    """Two-stage verification against one stage of the best width: the second stage pays a
    second read of every weight (and its requests are padded to a graph bucket), so it loses
    while the verify is partly weight-bound and gains on it only as the batch grows."""
    from specpilot.costmodel.phases import bound_by_width
    from specpilot.costmodel.phases import two_stage_bound

    probs = [0.3, 0.2, 0.15, 0.1, 0.08, 0.07, 0.05, 0.05]
    alone = two_stage_bound(TARGET, DRAFTER, H200, 8, 1, probs)
    widths = bound_by_width(TARGET, DRAFTER, H200, 8, 1, probs)
    assert alone["single_width"] == max(widths, key=widths.get)
    assert alone["single_bound"] == pytest.approx(max(widths.values()))
    assert alone["ratio"] < 1.0 and 1 <= alone["two_stage_prefix"] < alone["two_stage_width"]
    middle = two_stage_bound(TARGET, DRAFTER, H200, 8, 64, probs)
    crowded = two_stage_bound(TARGET, DRAFTER, H200, 8, 1024, probs)
    assert middle["ratio"] < crowded["ratio"]  # the rows it saves grow with the batch
    # stage 2 runs for the requests that accepted at least ``prefix`` drafts
    window = two_stage_verify_ms(TARGET, DRAFTER, H200, 8, 256, probs, width=5)
    assert set(window["by_prefix"]) == {1, 2, 3, 4}


def test_the_second_stage_is_padded_to_a_graph_bucket():
    from specpilot.costmodel.phases import padded_passing

    assert padded_passing(4, 1.0) == pytest.approx((1.0, 4.0))
    assert padded_passing(4, 0.0) == (0.0, 0.0)
    runs, rows = padded_passing(64, 0.62)  # about 40 pass: almost always the 64-row bucket
    assert runs == pytest.approx(1.0) and 62.5 < rows <= 64.0
    runs, rows = padded_passing(3, 0.5)  # 1 -> 1, 2 -> 2, 3 -> min(4, 3)
    assert runs == pytest.approx(7 / 8)
    assert rows == pytest.approx((3 * 1 + 3 * 2 + 1 * 3) / 8 / runs)


def test_overlap_pays_its_host_share_less_one_step_per_request():
    """Hiding the host's share of each step pays (gpu + host) / gpu, less the step each request
    holds its row after its last; with no host work it only loses, and a host slower than the GPU
    bounds the step instead."""
    from specpilot.costmodel.phases import overlap_schedule_bound

    # the seed-scale Qwen3.8-27B c=32 bench: ~49 ms steps, ~4 ms of host work between them
    seed = overlap_schedule_bound(49.0, 4.0, 64, 3.44)
    assert seed["step_ratio"] == pytest.approx(53 / 49)
    assert seed["occupancy"] == pytest.approx(18.6 / 19.6, rel=1e-3)
    assert seed["decode"] == pytest.approx(53 / 49 * 18.6 / 19.6, rel=1e-3)
    longer = overlap_schedule_bound(49.0, 4.0, 256, 3.44)  # longer requests lose less
    assert longer["decode"] > seed["decode"]
    assert overlap_schedule_bound(49.0, 0.0, 64, 3.44)["decode"] < 1.0
    assert overlap_schedule_bound(2.0, 3.0, 1e9, 3.0)["step_ratio"] == pytest.approx(5 / 3)
    with pytest.raises(ValueError, match="tau >= 1"):
        overlap_schedule_bound(49.0, 4.0, 64, 0.5)


def test_cli_prints_the_overlap_term_given_the_host_time(capsys):
    from specpilot import cli

    assert cli.main(["costmodel", "h200_c32_qwen38-27b_dflash2", "--concurrency", "32",
                     "--host-step-ms", "5"]) == 0
    out = capsys.readouterr().out
    assert "overlapped scheduling (host 5 ms per step" in out and "decode wall" in out
    assert cli.main(["costmodel", "h200_c32_qwen38-27b_dflash2", "--concurrency", "32"]) == 0
    assert "overlapped scheduling" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:  # one request: no batch to overlap
        cli.main(["costmodel", "h200_c32_qwen38-27b_dflash2", "--host-step-ms", "5"])
    assert exit_.value.code == 2 and "--concurrency N > 1" in capsys.readouterr().err
