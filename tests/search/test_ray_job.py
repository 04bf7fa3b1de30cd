"""``ray start --head`` + ``ray job submit ... -- python -m specpilot.search cpu_c1_tiny
--config C`` (one round, one trial) against a real head with its dashboard and job server."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.search.conftest import REPO
from tests.search.conftest import campaign_config
from tests.search.conftest import campaign_runs

DASHBOARD = "http://127.0.0.1:8265"


# Ports a Ray head takes by default besides the GCS port (dashboard 8265, client server 10001, the
# dashboard agent's HTTP 52365, workers 10002-19999): a GCS port among them fails `ray start` ("is
# trying to use a port number 52365 that is used by other components", seen on CI).
RAY_DEFAULT_PORTS = {8265, 10001, 52365, *range(10002, 20000)}


def _free_port() -> int:
    """A free local port that none of Ray's default components uses."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in RAY_DEFAULT_PORTS:
            return port


def _port_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_campaign_as_a_ray_job(tmp_path):
    if _port_busy(8265):
        pytest.fail("port 8265 is taken: another Ray head is running (ray stop)")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
           "SPECPILOT_CAMPAIGN_DIR": str(tmp_path / "store"), "RAY_USAGE_STATS_ENABLED": "0",
           # Ray >= 2.5x heads require a token (kept on); clients read it from ~/.ray/auth_token
           "RAY_AUTH_MODE": "token"}
    ray = str(Path(bin_dir) / "ray")
    start = subprocess.run(
        [ray, "start", "--head", "--port", str(_free_port()), "--num-cpus", "4", "--num-gpus",
         "2", "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
         "--dashboard-port", "8265", "--disable-usage-stats"], env=env, capture_output=True,
        text=True, timeout=180)
    assert start.returncode == 0, start.stdout + start.stderr
    # a one-round campaign of one mutation trial (the full embedded default has its own test):
    # what is checked here is where the driver and its workers ran
    small = campaign_config(tmp_path, agents=["mutation"], canary=False, proposals_per_agent=1)
    try:
        job = subprocess.run(
            [ray, "job", "submit", "--address", DASHBOARD, "--working-dir", ".", "--",
             "python", "-m", "specpilot.search", "cpu_c1_tiny", "--config", str(small)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert job.returncode == 0, job.stdout[-4000:] + job.stderr[-4000:]
        assert "champion of cpu_c1_tiny" in job.stdout
        assert "succeeded" in job.stdout.lower()
        # run on this machine without an address, the driver joins the running head
        direct = subprocess.run(
            [sys.executable, "-m", "specpilot.search", "cpu_c1_tiny", "--config", str(small),
             "--store-dir", str(tmp_path / "direct")], cwd="/", env=env, capture_output=True,
            text=True, timeout=900)
        assert direct.returncode == 0, direct.stdout[-4000:] + direct.stderr[-4000:]
        assert "joined the Ray cluster running on this machine" in direct.stdout
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
    runs = campaign_runs(tmp_path / "store", "cpu_c1_tiny")
    assert any(r.data.tags["kind"] == "candidate" for r in runs)
    # the workers ran on the head's (logical) GPUs, one job per worker at a time
    assert all(r.data.tags.get("worker.gpu_ids") for r in runs
               if r.data.tags["kind"] == "candidate")
