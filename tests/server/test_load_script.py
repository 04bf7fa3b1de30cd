"""experiments/load_test.py at small scale against the session server: 64 concurrent streams,
0 errors, and the numbers it reports are consistent."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "load_test.py"


def test_load_script_has_no_errors(server, tmp_path):
    out = tmp_path / "load.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--url", server.url, "--concurrency", "64",
                          "--num-requests", "64", "--max-tokens", "4", "--json", str(out)],
                         check=False, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["num_ok"] == 64 and result["num_errors"] == 0
    assert result["output_tok_s"] > 0
    assert 0 < result["latency_p50_s"] <= result["latency_p99_s"]
    assert result["server"]["setting"] == "cpu_c1_tiny"


def test_load_script_refuses_remote_hosts():
    run = subprocess.run([sys.executable, str(SCRIPT), "--url", "http://example.com:30000"],
                         check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "localhost only" in run.stderr
