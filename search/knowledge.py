"""The knowledge store: one Parquet row per verified mechanism trial, read back as priors.

A row says what a mechanism (a recipe delta) did to one champion in one setting: valid or not,
median speedup and its 95% CI, with the setting's features and the environment fingerprint. A new
campaign reads rows of *similar* settings (same GPU, target family, drafter, scenario — each match
adds weight) as priors: mean log speedup per mechanism, invalid trials counting as a loss. Rows of
the campaign itself are excluded, so a resumed campaign proposes exactly what it proposed before.

Layout: ``<dir>/part-<timestamp>-<id>.parquet``, one file per append (the driver is the only
writer), read as one pyarrow dataset.
"""

import json
import math
import time
import uuid
from pathlib import Path

SIMILARITY_KEYS = ("gpu", "target", "drafter", "scenario", "hybrid")
INVALID_LOG_EFFECT = -0.5
"""Prior effect of a mechanism that failed token forcing (as if it were ~40% slower)."""


def _schema():
    import pyarrow as pa

    return pa.schema([
        ("campaign_id", pa.string()), ("setting", pa.string()), ("round", pa.int32()),
        ("mechanism", pa.string()), ("agent", pa.string()), ("recipe_delta", pa.string()),
        ("valid", pa.bool_()), ("speedup", pa.float64()), ("ci_low", pa.float64()),
        ("ci_high", pa.float64()), ("gpu", pa.string()), ("target", pa.string()),
        ("drafter", pa.string()), ("scenario", pa.string()), ("hybrid", pa.bool_()),
        ("fingerprint", pa.string()), ("timestamp", pa.float64()),
    ])


class KnowledgeStore:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def append(self, rows: list[dict]) -> Path | None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not rows:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        schema = _schema()
        table = pa.Table.from_pylist([{f.name: row.get(f.name) for f in schema} for row in rows],
                                     schema=schema)
        path = self.directory / f"part-{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.replace(path)
        return path

    def rows(self) -> list[dict]:
        import pyarrow.dataset as ds

        files = sorted(self.directory.glob("part-*.parquet")) if self.directory.is_dir() else []
        if not files:
            return []
        return ds.dataset([str(f) for f in files], schema=_schema(), format="parquet").to_table() \
            .to_pylist()

    def priors(self, features: dict, exclude_campaign: str | None = None) -> dict[str, float]:
        """Mechanism -> similarity-weighted mean log speedup over rows of similar settings."""
        totals: dict[str, list[float]] = {}
        for row in self.rows():
            if row["campaign_id"] == exclude_campaign:
                continue
            weight = sum(1.0 for k in SIMILARITY_KEYS if row.get(k) == features.get(k))
            if weight == 0:
                continue
            if row["valid"] and row["speedup"] and row["speedup"] > 0:
                effect = math.log(row["speedup"])
            elif row["valid"] is False:
                effect = INVALID_LOG_EFFECT
            else:
                continue
            acc = totals.setdefault(row["mechanism"], [0.0, 0.0])
            acc[0] += weight * effect
            acc[1] += weight
        return {name: s / w for name, (s, w) in totals.items() if w > 0}


def trial_row(campaign_id: str, setting: str, round_: int, proposal, result: dict,
              features: dict) -> dict | None:
    """The knowledge row of one finished candidate trial (None if it never got a verdict)."""
    if result.get("state") not in ("ok", "invalid"):
        return None
    compare = result.get("compare") or {}
    ci = compare.get("ci95") or [None, None]
    return {"campaign_id": campaign_id, "setting": setting, "round": round_,
            "mechanism": proposal.mechanism, "agent": proposal.agent,
            "recipe_delta": json.dumps(proposal.delta, sort_keys=True),
            "valid": result["state"] == "ok", "speedup": compare.get("median_speedup"),
            "ci_low": ci[0], "ci_high": ci[1], "gpu": features.get("gpu"),
            "target": features.get("target"), "drafter": features.get("drafter"),
            "scenario": features.get("scenario"), "hybrid": features.get("hybrid"),
            "fingerprint": json.dumps(result.get("fingerprint", {}), sort_keys=True),
            "timestamp": time.time()}
