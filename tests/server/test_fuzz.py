"""Schemathesis fuzzes every operation of the live server's OpenAPI schema (>= 1000 requests in
all, positive and negative cases): no response may be a 5xx, and the server is alive afterwards.

A dedicated server with ``--max-tokens-limit 4`` keeps each valid generation short (the limit is in
the schema as ``maximum``, so generated requests stay within it or are answered 400).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

MAX_EXAMPLES = 300  # per operation; with the coverage phase this makes ~1500 requests
MIN_REQUESTS = 1000
FUZZ_TIMEOUT_S = 200


def _schemathesis() -> list[str]:
    found = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "schemathesis.cli"]


def _num_requests(server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("specpilot_http_requests_total{"))


def test_schemathesis_finds_no_server_error(server_factory, tmp_path):
    with server_factory(tmp_path, "--max-tokens-limit", "4", "--max-batch", "4") as server:
        before = _num_requests(server)
        cmd = [*_schemathesis(), "run", f"{server.url}/openapi.json",
               "--checks", "not_a_server_error", "--max-examples", str(MAX_EXAMPLES),
               "--phases", "coverage,fuzzing", "--suppress-health-check", "all", "--seed", "0",
               "--workers", "1", "--request-timeout", "30", "--max-failures", "5",
               "--output-sanitize", "false"]
        run = subprocess.run(cmd, check=False, capture_output=True, text=True,
                             timeout=FUZZ_TIMEOUT_S, cwd=tmp_path)
        report = run.stdout[-6000:] + run.stderr[-2000:]
        assert run.returncode == 0, f"schemathesis found failures:\n{report}\n" \
                                    f"server log:\n{server.log_tail()}"
        num_requests = _num_requests(server) - before - 1  # minus this scrape's own count
        assert num_requests >= MIN_REQUESTS, report
        assert server.metric("specpilot_http_requests_total",
                             'method="POST",path="/generate",status="200"') > 0
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        assert server.proc.poll() is None
        fivexx = [line for line in server.metrics().splitlines()
                  if line.startswith("specpilot_http_requests_total{") and 'status="5' in line]
        assert not fivexx, fivexx
