"""The README's main job, ``python -m specpilot.search cpu_c1_tiny``, run once per test session.

``tests/search/test_embedded_default.py`` checks its records; export, serve, retune and the MLflow
UI (``tests/bundle``) work from them. The campaign has its own kernel-config cache
(``SPECPILOT_CACHE_DIR``); tests that change anything work on a :meth:`Campaign.copy`.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTING = "cpu_c1_tiny"
TIMEOUT_S = 900


class Campaign:
    """A finished campaign: its store directory and the environment its commands run with."""

    def __init__(self, store: Path, kernel_cache: Path):
        self.store, self.kernel_cache = store, kernel_cache
        self.stdout, self.elapsed_s, self.summary = "", 0.0, {}

    def env(self, **extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "SPECPILOT_FAKE_FINGERPRINT"}
        env.update({"SPECPILOT_CACHE_DIR": str(self.kernel_cache),
                    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false", **extra})
        return env

    def copy(self, where: Path) -> "Campaign":
        """An independent copy (store and kernel cache) that a test may change."""
        shutil.copytree(self.store, where / "store")
        shutil.copytree(self.kernel_cache, where / "kernel-cache")
        return Campaign(where / "store", where / "kernel-cache")

    def client(self):
        from specpilot.search.records import mlflow_client

        return mlflow_client(f"sqlite:///{self.store / 'mlflow.db'}")


def run_default_campaign(root: Path) -> Campaign:
    """Run the embedded default into ``root``; fails with the driver's output if it fails."""
    done = Campaign(root / "store", root / "kernel-cache")
    summary = root / "summary.json"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specpilot.search", SETTING, "--store-dir",
                           str(done.store), "--json", str(summary)], check=False, cwd=REPO,
                          env=done.env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    done.elapsed_s = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    done.stdout, done.summary = proc.stdout, json.loads(summary.read_text())
    return done
