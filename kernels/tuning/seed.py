"""Warm-start the tuned-config cache from a committed kernel benchmark (experiments/results).

Only rows measured under exactly this environment (same ``kernel_key``: GPU SKU and compute
capability, driver, CUDA, torch, triton) are stored; anything else is stale and skipped. So are
a sweep's winners that its wall-clock budget cut short (``cut_short`` in the row's op record:
once over budget, experiments/kernels_h200.py times only the previous M's winner, or the default
config where that cannot run this M), and a winner slower than the entry already stored for the
same key: a short sweep never replaces what a full one found. Seeding them is what made the
speculative engine with W12 target weights look slower than stock at 0d47649 (its M = 16 configs
came from a 60-second sweep; results/h200-2026-12-02-w12-ar-run28-profile.json).
"""

import json
from pathlib import Path

from specpilot.fingerprint import current
from specpilot.kernels.tuning.cache import entry_key
from specpilot.kernels.tuning.cache import load_entry
from specpilot.kernels.tuning.cache import store_entry
from specpilot.kernels.tuning.ops import complete_config
from specpilot.kernels.tuning.ops import space_of


def seed_from_results(path: str | Path, ops: tuple[str, ...] = ("skinny_gemm",)) -> int:
    """Store each row's best config of ``ops`` if it was measured here by a whole sweep and is
    faster than what the cache holds for its key; returns how many were stored."""
    results = json.loads(Path(path).read_text())
    here = current("cuda").kernel_key()
    if results.get("kernel_key") != here:
        return 0
    stored = 0
    for row in results["rows"]:
        for op in ops:
            record = row.get(op) or {}
            best = record.get("best")
            if not best or record.get("cut_short"):
                continue
            key = entry_key(op, row["N"], row["K"], space_of(op).m_bucket(row["M"]), here)
            held = load_entry(key)
            if held is not None and held.get("p50_us", float("inf")) <= best["timing"]["p50_us"]:
                continue
            store_entry(key, {"config": complete_config(space_of(op), best["config"]),
                              "source": str(path),
                              "p50_us": best["timing"]["p50_us"]})
            stored += 1
    return stored
