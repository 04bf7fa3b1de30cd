"""The results store: one Parquet row per bench / compare / score / validate run (pyarrow).

Layout under a results directory (default ``experiments/results``, or
``$SPECPILOT_RESULTS_DIR``)::

    records/<UTC time>-<kind>-<run_id>.parquet   one file per run (append-only: no lock needed)
    plots/<run_id>/*.png                         the run's plots

Each row holds the fingerprint fields, the setting and recipe hashes, a few key scalars for
querying, and the whole record as JSON (``metrics_json``), so ``read`` returns records exactly as
they were written. Rows written by older code read back with missing columns as null.
"""

import datetime
import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMITTED_RESULTS_DIR = REPO_ROOT / "experiments" / "results"
FINGERPRINT_FIELDS = ("gpu", "compute_capability", "driver", "cuda", "torch", "triton", "python",
                      "commit")


def default_results_dir() -> Path:
    """``$SPECPILOT_RESULTS_DIR`` when set (tests, scratch runs), else ``experiments/results``."""
    return Path(os.environ.get("SPECPILOT_RESULTS_DIR", COMMITTED_RESULTS_DIR))


def _schema():
    import pyarrow as pa

    strings = ["run_id", "kind", "setting", "engine", "baseline", "recipe_hash", "setting_hash",
               "acceptance", *FINGERPRINT_FIELDS]
    floats = ["tok_s", "ms_per_token", "tau", "median_speedup", "ci95_low", "ci95_high",
              "accuracy"]
    return pa.schema([pa.field("timestamp", pa.timestamp("ms", tz="UTC"))]
                     + [pa.field(name, pa.string()) for name in strings]
                     + [pa.field(name, pa.float64()) for name in floats]
                     + [pa.field("passed", pa.bool_()), pa.field("metrics_json", pa.string())])


def _scalars(record: dict) -> dict:
    """The key numbers of a record, by kind (None where a kind has no such number)."""
    summary = record.get("summary") or {}
    ms = summary.get("ms_per_token") or {}
    ci = record.get("ci95") or [None, None]
    return {
        "tok_s": summary.get("tok_s"),
        "ms_per_token": ms.get("median"),
        "tau": summary.get("tau", record.get("tau")),
        "median_speedup": record.get("median_speedup"),
        "ci95_low": ci[0], "ci95_high": ci[1],
        "accuracy": record.get("accuracy"),
        "passed": record.get("passed"),
    }


def to_row(record: dict) -> dict:
    """One store row from a record (``specpilot.bench.records.header`` has the common fields)."""
    fingerprint = record.get("fingerprint") or {}
    timestamp = datetime.datetime.fromtimestamp(record["timestamp"], tz=datetime.timezone.utc)
    row = {"timestamp": timestamp, "metrics_json": json.dumps(record, sort_keys=True)}
    for key in ("run_id", "kind", "setting", "engine", "baseline", "recipe_hash", "setting_hash",
                "acceptance"):
        value = record.get(key)
        row[key] = None if value is None else str(value)
    for key in FINGERPRINT_FIELDS:
        row[key] = fingerprint.get(key)
    row.update(_scalars(record))
    return row


def append(record: dict, results_dir: str | Path | None = None) -> Path:
    """Write ``record`` as one new Parquet file under ``results_dir/records``; returns its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records_dir = Path(results_dir or default_results_dir()) / "records"
    records_dir.mkdir(parents=True, exist_ok=True)
    row = to_row(record)
    stamp = row["timestamp"].strftime("%Y%m%dT%H%M%S")
    path = records_dir / f"{stamp}-{record['kind']}-{record['run_id']}.parquet"
    table = pa.Table.from_pylist([row], schema=_schema())
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)  # readers never see a half-written file
    return path


def read_table(results_dir: str | Path | None = None, kind: str | None = None):
    """All rows as a ``pyarrow.Table`` sorted by time, optionally of one ``kind``."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    records_dir = Path(results_dir or default_results_dir()) / "records"
    files = sorted(str(p) for p in records_dir.glob("*.parquet")) if records_dir.is_dir() else []
    if not files:
        return pa.Table.from_pylist([], schema=_schema())
    dataset = ds.dataset(files, format="parquet", schema=_schema())
    table = dataset.to_table(filter=ds.field("kind") == kind if kind else None)
    return table.sort_by("timestamp")


def read(results_dir: str | Path | None = None, kind: str | None = None) -> list[dict]:
    """All records (as written) in time order, optionally of one ``kind``."""
    column = read_table(results_dir, kind).column("metrics_json")
    return [json.loads(s) for s in column.to_pylist()]
