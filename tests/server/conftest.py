"""A real ``specpilot serve`` in a subprocess on a free localhost port (no mocks).

The session server serves ``cpu_c1_tiny`` with the ``stock`` engine; ``start_server`` starts more
(the fuzz test uses one with a small ``--max-tokens-limit``). SPECPILOT_HOME comes from the
environment (tests/conftest.py), so the first start may generate the tiny models (up to ~2 min).
"""

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

STARTUP_TIMEOUT_S = 120
POLL_S = 0.25


def free_port() -> int:
    """A port nothing listens on right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A running server: ``url``, its process and its log file."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Path):
        self.proc, self.url, self.log = proc, url, log

    def log_tail(self, num_chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-num_chars:]

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def metric(self, name: str, labels: str = "") -> float:
        """One sample of /metrics (0 if absent), e.g. ``metric("specpilot_requests_total",
        'endpoint="generate",finish_reason="abort"')``."""
        pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
        found = re.search(pattern, self.metrics(), re.MULTILINE)
        return float(found.group(1)) if found else 0.0


def _wait_ready(proc: subprocess.Popen, url: str) -> bool:
    """Poll /health (short timeouts) until it answers, the process exits, or time runs out."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        try:
            proc.wait(timeout=POLL_S)  # the wait between polls; returns early if it died
            return False
        except subprocess.TimeoutExpired:
            continue
    return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@contextlib.contextmanager
def start_server(log_dir: Path, *args: str, setting: str = "cpu_c1_tiny", engine: str = "stock"):
    """Run ``python -m specpilot serve SETTING ENGINE --port <free> *args`` for the block."""
    for attempt in range(3):  # a port taken between free_port() and bind: try another
        port = free_port()
        log = log_dir / f"serve-{engine}-{port}.log"
        cmd = [sys.executable, "-m", "specpilot", "serve", setting, engine, "--port", str(port),
               "--log-level", "warning", *args]
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    env=os.environ.copy())
        url = f"http://127.0.0.1:{port}"
        try:
            if _wait_ready(proc, url):
                yield Server(proc, url, log)
                return
            text = log.read_text(errors="replace")
            if "address already in use" not in text.lower() or attempt == 2:
                pytest.fail(f"server did not start ({' '.join(cmd)}):\n{text[-4000:]}")
        finally:
            _stop(proc)


@pytest.fixture(scope="session")
def server_factory():
    """``start_server`` for tests that need a server of their own (a context manager)."""
    return start_server


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The session's server: cpu_c1_tiny, stock engine, 16 batch rows."""
    with start_server(tmp_path_factory.mktemp("server"), "--max-batch", "16") as srv:
        yield srv
    assert srv.proc.returncode is not None


@pytest.fixture(scope="session")
def openai_client(server):
    """The official OpenAI client pointed at the session server."""
    from openai import OpenAI

    with OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def http(server):
    """A plain HTTP client with the session server as base URL."""
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="session")
def model_name() -> str:
    return "cpu_c1_tiny"


@pytest.fixture(scope="session")
def served_models(model_name):
    """The models the session server serves (cpu_c1_tiny's trained pair), loaded in this process."""
    from specpilot.build import load_models
    from specpilot.settings import load_setting

    return load_models(load_setting(model_name))


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The tokenizer the tiny target ships (a copy of specpilot/data/tiny_tokenizer.json)."""
    from tokenizers import Tokenizer

    from specpilot.datasets import DATA_DIR

    return Tokenizer.from_file(str(DATA_DIR / "tiny_tokenizer.json"))
