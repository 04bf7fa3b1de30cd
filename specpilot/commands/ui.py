"""``specpilot ui [SETTING]``: the MLflow UI on a campaign store, in the foreground (Ctrl-C stops).

Runs ``mlflow server`` on the store's SQLite database (artifacts served from the store's
``artifacts/``) on 127.0.0.1 only, MLflow's localhost-only security default, and prints the URL
with a link to each ``specpilot/<setting>`` experiment's runs table (best ``speedup_vs_champion``
first) and to its registered model, whose ``champion`` alias names the current champion. In the
runs table, the filter ``tags.valid = 'true'`` keeps the verdicts that passed token forcing;
``speedup_vs_stock`` ranks the final and retune runs.
"""

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

from specpilot.cli import Positional

HOST = "127.0.0.1"
RANKED = "orderByKey=metrics.%60speedup_vs_champion%60&orderByAsc=false"
STARTUP_TIMEOUT_S = 120


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str | None, Positional, "print links for this setting only (default: "
                       "every specpilot experiment in the store)"] = None
    store_dir: Annotated[str | None, "campaign store directory (default: "
                         "$SPECPILOT_HOME/campaigns)"] = None
    port: Annotated[int, "port on 127.0.0.1 (0: any free port)"] = 5000

    def __post_init__(self):
        if not 0 <= self.port <= 65535:
            raise ValueError("--port must be in 0..65535")


def _bind_check(port: int) -> int:
    """``port`` if nothing listens there (a free one for 0); a clear error otherwise."""
    from specpilot.errors import SpecPilotError

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError as err:
            raise SpecPilotError(f"port {port} on {HOST} is taken ({err.strerror}); pass "
                                 "--port N (or --port 0 for any free port)") from None
        return sock.getsockname()[1]


def _wait_ready(proc: subprocess.Popen, url: str) -> bool:
    import urllib.request

    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2).read()
            return True
        except OSError:
            pass
        try:
            proc.wait(timeout=0.5)
            return False
        except subprocess.TimeoutExpired:
            continue
    return False


def _links(uri: str, url: str, only: str | None) -> list[str]:
    from mlflow.exceptions import MlflowException

    from specpilot.search.records import mlflow_client

    client = mlflow_client(uri)
    lines = []
    for experiment in client.search_experiments(filter_string="name LIKE 'specpilot/%'"):
        setting = experiment.name.removeprefix("specpilot/")
        if only and setting != only:
            continue
        # The runs table, best speedup first (MLflow 3 opens an experiment on its GenAI overview).
        lines.append(f"  {experiment.name}: {url}/#/experiments/{experiment.experiment_id}/runs"
                     f"?{RANKED}")
        model = f"specpilot-{setting}"
        try:
            version = client.get_model_version_by_alias(model, "champion")
        except MlflowException:
            continue
        lines.append(f"    champion {model}@champion = v{version.version} (run {version.run_id}): "
                     f"{url}/#/models/{model}/versions/{version.version}")
    return lines


def run(args: Args) -> int:
    from specpilot.errors import SpecPilotError
    from specpilot.search.driver import default_store_dir

    store = Path(args.store_dir) if args.store_dir else default_store_dir()
    db = store / "mlflow.db"
    if not db.is_file():
        raise SpecPilotError(f"no campaign records at {db}; run `specpilot search SETTING "
                             "--store-dir DIR` first (or pass --store-dir)")
    uri = f"sqlite:///{db.resolve()}"
    port = _bind_check(args.port)
    url = f"http://{HOST}:{port}"
    links = _links(uri, url, args.setting)
    if args.setting and not links:
        raise SpecPilotError(f"{db} has no experiment specpilot/{args.setting}")
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
           "--artifacts-destination", str((store / "artifacts").resolve()),
           "--host", HOST, "--port", str(port), "--workers", "2"]
    # Its own process group: stopping the UI stops mlflow's uvicorn workers too.
    proc = subprocess.Popen(cmd, start_new_session=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if not _wait_ready(proc, url):
            raise SpecPilotError(f"mlflow server did not come up on {url} (exit code "
                                 f"{proc.poll()}); command: {' '.join(cmd)}")
        print(f"specpilot ui: MLflow UI on {url} (store {store}); Ctrl-C stops it", flush=True)
        for line in links:
            print(line, flush=True)
        return proc.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(proc)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 15 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue
