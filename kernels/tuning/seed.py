"""Warm-start the tuned-config cache from a committed kernel benchmark (experiments/results).

Only rows measured under exactly this environment (same ``kernel_key``: GPU SKU and compute
capability, driver, CUDA, torch, triton) are stored; anything else is stale and skipped.
"""

import json
from pathlib import Path

from specpilot.fingerprint import current
from specpilot.kernels.tuning.cache import entry_key
from specpilot.kernels.tuning.cache import store_entry
from specpilot.kernels.tuning.ops import complete_config
from specpilot.kernels.tuning.ops import space_of


def seed_from_results(path: str | Path, ops: tuple[str, ...] = ("skinny_gemm",)) -> int:
    """Store each row's best config of ``ops`` if it was measured here; returns how many were stored."""
    results = json.loads(Path(path).read_text())
    here = current("cuda").kernel_key()
    if results.get("kernel_key") != here:
        return 0
    stored = 0
    for row in results["rows"]:
        for op in ops:
            best = (row.get(op) or {}).get("best")
            if not best:
                continue
            key = entry_key(op, row["N"], row["K"], space_of(op).m_bucket(row["M"]), here)
            store_entry(key, {"config": complete_config(space_of(op), best["config"]),
                              "source": str(path),
                              "p50_us": best["timing"]["p50_us"]})
            stored += 1
    return stored
