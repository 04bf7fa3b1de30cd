"""Export, serve --bundle, retune and the MLflow UI against one real embedded-default campaign.

The session runs ``python -m specpilot.search cpu_c1_tiny`` once (``tests/default_campaign.py``,
~70 s on 2 cores, shared with tests/search/test_embedded_default.py) with its own kernel-config
cache (``SPECPILOT_CACHE_DIR``), and exports its champion once; the tests read both and copy them
before changing anything. Every command runs as a real subprocess.
"""

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.default_campaign import REPO
from tests.default_campaign import SETTING
from tests.default_campaign import Campaign
from tests.server.conftest import _stop
from tests.server.conftest import free_port

STARTUP_TIMEOUT_S = 180


def specpilot(campaign: Campaign, *args: str, timeout_s: float = 600,
              **env: str) -> subprocess.CompletedProcess:
    """``python -m specpilot ARGS`` with the campaign's environment (plus ``env``)."""
    return subprocess.run([sys.executable, "-m", "specpilot", *args], check=False, cwd=REPO,
                          env=campaign.env(**env), capture_output=True, text=True,
                          timeout=timeout_s)


@pytest.fixture(scope="session")
def campaign(default_campaign) -> Campaign:
    """The session's embedded-default campaign (tests/default_campaign.py)."""
    return default_campaign


@pytest.fixture(scope="session")
def exported(campaign, tmp_path_factory) -> Path:
    """The campaign's champion exported once (``specpilot export cpu_c1_tiny``)."""
    out = tmp_path_factory.mktemp("export") / "bundle"
    proc = specpilot(campaign, "export", SETTING, "--store-dir", str(campaign.store),
                     "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "manifest digest" in proc.stdout
    return out


@contextlib.contextmanager
def serve_bundle(campaign: Campaign, bundle: Path, log: Path, *args: str, **env: str):
    """``specpilot serve --bundle BUNDLE`` on a free port until the block ends; yields its URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "specpilot", "serve", "--bundle", str(bundle), "--port",
           str(port), "--log-level", "warning", *args]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=campaign.env(**env), stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.25)
        else:
            pytest.fail(f"{' '.join(cmd)} did not start:\n{log.read_text()[-4000:]}")
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def cli():
    """``cli(campaign, *args, **env)``: run ``python -m specpilot`` (see :func:`specpilot`)."""
    return specpilot


@pytest.fixture(scope="session")
def bundle_server():
    """``bundle_server(campaign, bundle, log, *args, **env)``: see :func:`serve_bundle`."""
    return serve_bundle


@pytest.fixture(scope="session")
def reference_models():
    """cpu_c1_tiny's models loaded in this process (the in-process side of the parity check)."""
    from specpilot.build import load_models
    from specpilot.settings import load_setting

    return load_models(load_setting(SETTING))
