"""The Parquet results store: append-only files, typed columns, records read back as written."""

import pyarrow.parquet as pq

from specpilot.bench import header
from specpilot.bench import store
from specpilot.settings import load_setting


def _record(kind: str, **fields) -> dict:
    return {**header(kind, load_setting("cpu_c1_tiny"), "stock"), **fields}


def test_append_and_read_back(tmp_path):
    bench = _record("bench", acceptance="measured",
                    summary={"tok_s": 50.0, "ms_per_token": {"median": 20.0}, "tau": 1.5})
    compare = _record("compare", baseline="ar", median_speedup=1.2, ci95=[1.1, 1.3])
    score = _record("score", accuracy=0.25)
    paths = [store.append(r, tmp_path) for r in (bench, compare, score)]
    assert all(p.parent == tmp_path / "records" and p.suffix == ".parquet" for p in paths)
    assert store.read(tmp_path) == [bench, compare, score]
    assert store.read(tmp_path, kind="compare") == [compare]
    rows = {r["kind"]: r for r in store.read_table(tmp_path).to_pylist()}
    assert (rows["bench"]["tok_s"], rows["bench"]["ms_per_token"], rows["bench"]["tau"]) == \
        (50.0, 20.0, 1.5)
    assert (rows["compare"]["baseline"], rows["compare"]["ci95_low"]) == ("ar", 1.1)
    assert rows["score"]["accuracy"] == 0.25 and rows["score"]["tok_s"] is None
    assert rows["bench"]["gpu"] == bench["fingerprint"]["gpu"]
    assert rows["bench"]["setting_hash"] == load_setting("cpu_c1_tiny").hash()


def test_every_file_has_the_full_schema(tmp_path):
    path = store.append(_record("validate", passed=True, tau=1.0), tmp_path)
    schema = pq.read_schema(path)
    assert schema.names == store._schema().names
    assert str(schema.field("timestamp").type) == "timestamp[ms, tz=UTC]"


def test_empty_store_reads_as_empty(tmp_path):
    assert store.read(tmp_path) == []
    assert store.read_table(tmp_path).num_rows == 0


def test_default_store_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECPILOT_RESULTS_DIR", str(tmp_path))
    path = store.append(_record("score", accuracy=0.5))
    assert path.parent == tmp_path / "records"
    assert store.read()[0]["accuracy"] == 0.5
