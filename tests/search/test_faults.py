"""Fault tolerance with real Ray: a worker node killed mid-trial, a driver killed mid-campaign."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from specpilot.search.config import CampaignConfig
from tests.search.conftest import campaign_config
from tests.search.conftest import campaign_runs
from tests.search.conftest import mlflow_client


def test_worker_node_killed_mid_trial_is_rerun_elsewhere(tmp_path, ray_shutdown):
    import ray
    from ray.cluster_utils import Cluster

    from specpilot.search.driver import Campaign

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    nodes = [cluster.add_node(num_cpus=1, num_gpus=1) for _ in range(3)]
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        config = CampaignConfig.load(campaign_config(
            tmp_path, agents=["mutation"], canary=False, proposals_per_agent=1,
            campaign_dir=str(tmp_path / "store")), setting="cpu_c1_tiny")
        campaign = Campaign(config, log=lambda *_: None)
        killed = {}

        def kill_node_of(worker):
            info = ray.get(worker.describe.remote())
            killed["evaluating"] = _wait_for_evaluation(info["pid"], timeout_s=120.0)
            node_id = info["node_id"]
            node = next(n for n in nodes if n.node_id == node_id)
            killed["node_id"] = node_id
            cluster.remove_node(node)

        def on_start(job, worker):
            if job.spec["kind"] == "candidate" and not killed.get("started"):
                killed["started"], killed["key"] = True, job.key
                threading.Thread(target=kill_node_of, args=(worker,), daemon=True).start()

        campaign.on_job_start = on_start
        summary = campaign.run()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert killed.get("node_id"), "no candidate trial started"
    assert killed["evaluating"], "the node was killed after its evaluation had finished"
    runs = [r for r in campaign_runs(tmp_path / "store", "cpu_c1_tiny")
            if r.data.tags.get("trial_key") == killed["key"]]
    finished = [r for r in runs if r.info.status == "FINISHED"]
    lost = [r for r in runs if r.info.status == "KILLED"]
    assert len(finished) == 1, [(r.info.status, r.data.tags.get("state")) for r in runs]
    assert len(lost) == 1 and lost[0].data.tags["failure_kind"] == "worker_lost"
    assert finished[0].data.tags["worker.node_id"] != killed["node_id"]
    assert finished[0].data.tags["state"] in ("ok", "invalid")
    assert summary["trials_run"] >= 2


def _wait_for_evaluation(worker_pid: int, timeout_s: float) -> bool:
    """Wait until the worker process ``worker_pid`` runs an evaluation subprocess (its child with
    ``specpilot.workers.evaluate`` on the command line; the cluster's nodes are local processes),
    then a moment more so that the job is well under way. False if none appeared in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            try:
                stat = (proc / "stat").read_text()
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == worker_pid and b"specpilot.workers.evaluate" in cmdline:
                time.sleep(1.0)
                return True
        time.sleep(0.1)
    return False


def _campaign_proc(config, store, log):
    env = {**os.environ}
    return subprocess.Popen([sys.executable, "-m", "specpilot.search", "cpu_c1_tiny", "--config",
                             str(config), "--store-dir", str(store)], stdout=log,
                            stderr=subprocess.STDOUT, env=env, cwd="/", start_new_session=True)


def test_driver_killed_and_restarted_resumes_without_repeating_trials(tmp_path):
    store = tmp_path / "store"
    config = campaign_config(tmp_path, rounds=2, agents=["mutation"], canary=False,
                             proposals_per_agent=2, num_workers=1)
    with open(tmp_path / "first.log", "w") as log:
        proc = _campaign_proc(config, store, log)
        deadline = time.monotonic() + 400
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(2.0)
                if (store / "mlflow.db").exists():
                    try:
                        runs = campaign_runs(store, "cpu_c1_tiny")
                    except Exception:  # noqa: BLE001 - the store is still being created
                        continue
                    if sum(r.data.tags.get("kind") == "candidate" for r in runs) >= 1:
                        break
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and its local Ray
            proc.wait()
    before = campaign_runs(store, "cpu_c1_tiny")
    assert any(r.data.tags.get("kind") == "candidate" for r in before), \
        (tmp_path / "first.log").read_text()[-3000:]
    with open(tmp_path / "second.log", "w") as log:
        proc = _campaign_proc(config, store, log)
        assert proc.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()[-3000:]
    text = (tmp_path / "second.log").read_text()
    assert "(resumed)" in text and "[resume]" in text
    after = campaign_runs(store, "cpu_c1_tiny")
    finished_keys = [r.data.tags["trial_key"] for r in after
                     if r.info.status in ("FINISHED", "FAILED") and "trial_key" in r.data.tags]
    assert len(finished_keys) == len(set(finished_keys)), "a finished trial was run again"
    assert len(after) > len(before)
    versions = mlflow_client(store).search_model_versions("name='specpilot-cpu_c1_tiny'")
    run_ids = [v.run_id for v in versions]
    assert run_ids and len(run_ids) == len(set(run_ids)), "a replayed round re-registered a run"
