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
