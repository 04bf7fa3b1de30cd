"""Processes that open one new SQLite MLflow store at the same moment (a campaign driver starting
while the UI or a test polls its store) all get a working store: MLflow's first-use table creation
runs under the store's init lock (``search.records.mlflow_client``), where unguarded it can fail
with ``table _alembic_tmp_metrics already exists``."""

import subprocess
import sys

OPEN = """
import sys
from specpilot.search.records import mlflow_client
client = mlflow_client(sys.argv[1])
client.create_experiment(f"specpilot/race-{sys.argv[2]}")
print(len(client.search_experiments()))
"""


def test_concurrent_first_opens_of_a_store_all_succeed(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    procs = [subprocess.Popen([sys.executable, "-c", OPEN, uri, str(i)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    results = [proc.communicate(timeout=240) + (proc.returncode,) for proc in procs]
    for out, err, code in results:
        assert code == 0, err[-2000:]
    from specpilot.search.records import mlflow_client

    names = {e.name for e in mlflow_client(uri).search_experiments()}
    assert {f"specpilot/race-{i}" for i in range(3)} <= names
