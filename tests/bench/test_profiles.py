"""Measured acceptance profiles ship as Parquet and replay what was measured."""

import json
from pathlib import Path

import pytest

from specpilot.bench.workload import load_profile
from specpilot.errors import SpecPilotError

RECORD = Path(__file__).resolve().parents[2] / "experiments" / "results" / \
    "h200-2026-11-29-proxy-run3.json"


def test_shipped_proxy_profile_matches_its_committed_record():
    measured = json.loads(RECORD.read_text())["call_2"]["training"]["profiles"]
    assert set(measured) == {"gsm8k", "math500", "humaneval", "mbpp"}
    for dataset, summary in measured.items():
        profile = load_profile(f"profile:proxy-h200-dflash2#{dataset}", 8, Path("."))
        assert profile.tau == pytest.approx(summary["tau"], abs=1e-3)
        counts = [summary["histogram"].get(str(k), 0) for k in range(1, 9)]
        assert profile.probs == pytest.approx([c / sum(counts) for c in counts])


@pytest.mark.parametrize("spec,message", [
    ("profile:proxy-h200-dflash2", "expected profile:NAME#DATASET"),
    ("profile:no-such-pair#gsm8k", "no no-such-pair.parquet"),
    ("profile:proxy-h200-dflash2#no-such-dataset", "no rows for dataset"),
])
def test_bad_profile_specs_fail_clearly(spec, message):
    with pytest.raises(SpecPilotError, match=message):
        load_profile(spec, 8, Path("."))


def test_a_profile_measured_at_another_block_size_is_refused():
    with pytest.raises(SpecPilotError, match="block size 8, not 16"):
        load_profile("profile:proxy-h200-dflash2#gsm8k", 16, Path("."))


@pytest.mark.parametrize("spec", ["tau:6.31", "profile:proxy-h200-dflash2#gsm8k"])
def test_a_narrower_verify_replays_the_native_profile_truncated(spec):
    """A recipe that verifies fewer positions than the drafter drafts keeps the drafter's
    per-position acceptance: P(k) is unchanged below the cut and the tail piles up at the cut, so
    its tau can only drop (before this, tau:X was re-solved at the narrow width and a block-4
    recipe replayed a *higher* per-position acceptance than stock)."""
    native = load_profile(spec, 8, Path("."))
    narrow = load_profile(spec, 4, Path("."), native_block=8)
    assert len(narrow.probs) == 4
    assert narrow.probs[:3] == pytest.approx(native.probs[:3])
    assert narrow.probs[3] == pytest.approx(sum(native.probs[3:]))
    assert narrow.tau < native.tau
    assert load_profile(spec, 8, Path("."), native_block=8).probs == native.probs


def test_a_wider_block_than_the_profile_cannot_be_replayed():
    with pytest.raises(SpecPilotError, match="defined at the drafter's block size 8"):
        load_profile("tau:3.5", 12, Path("."), native_block=8)
