"""``specpilot ui`` in a real headless Chromium (selenium + Debian's chromium and chromedriver):
the campaign's experiment, its runs with their speedup metric, and the champion alias are visible.

Screenshots go to ``$CI_ARTIFACTS_DIR/mlflow-ui`` (default ``.cache/ci-artifacts/mlflow-ui``).
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

SETTING = "cpu_c1_tiny"
REPO = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PAGE_TIMEOUT_S = 90


def _browser() -> tuple[str, str] | None:
    binary = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    driver = shutil.which("chromedriver")
    return (binary, driver) if binary and driver else None


def _artifacts_dir() -> Path:
    root = Path(os.environ.get("CI_ARTIFACTS_DIR") or REPO / ".cache" / "ci-artifacts")
    path = root / "mlflow-ui"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _start_ui(campaign, log: Path) -> tuple[subprocess.Popen, str]:
    """``specpilot ui --port 0``; returns the process and the URL it printed."""
    out = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "specpilot", "ui", SETTING, "--store-dir",
                             str(campaign.store), "--port", "0"], cwd=REPO, env=campaign.env(),
                            stdout=out, stderr=subprocess.STDOUT, text=True)
    out.close()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"MLflow UI on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            return proc, found.group(1)
        time.sleep(0.5)
    proc.terminate()
    pytest.fail(f"specpilot ui did not start:\n{log.read_text()[-4000:]}")


def _chrome(binary: str, driver: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1600,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def _shown(value: float) -> str:
    """A metric as MLflow's compare view prints it: rounded to 3 decimals, no trailing ``.0``."""
    text = repr(round(value, 3))
    return text[:-2] if text.endswith(".0") else text


def _page(chrome, url: str, expected: list[str], shot: Path, scroll_to: str | None = None) -> str:
    """Open ``url``, wait until every string of ``expected`` is on the page, screenshot it
    (scrolled to the heading ``scroll_to`` if given)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chrome.get(url)

    def text(driver) -> str:
        return driver.find_element(By.TAG_NAME, "body").text

    try:
        WebDriverWait(chrome, PAGE_TIMEOUT_S, poll_frequency=0.5).until(
            lambda d: all(s in text(d) for s in expected))
    except TimeoutException:
        chrome.save_screenshot(str(shot))
        body = text(chrome)
        missing = [s for s in expected if s not in body]
        pytest.fail(f"{url}: {missing} not shown after {PAGE_TIMEOUT_S} s (screenshot {shot}):\n"
                    f"{body[:3000]}")
    headings = chrome.find_elements(By.XPATH, f"//*[normalize-space(text())='{scroll_to}']") \
        if scroll_to else []
    if headings:
        chrome.execute_script("arguments[0].scrollIntoView({block: 'start'});", headings[-1])
    chrome.save_screenshot(str(shot))
    return text(chrome)


@pytest.mark.skipif(_browser() is None, reason="no chromium/google-chrome + chromedriver on PATH "
                    "(.ci/run installs Debian's chromium and chromium-driver)")
def test_mlflow_ui_shows_runs_speedups_and_the_champion(campaign, tmp_path):
    client = campaign.client()
    experiment = client.get_experiment_by_name(f"specpilot/{SETTING}")
    champion = client.get_model_version_by_alias(f"specpilot-{SETTING}", "champion")
    champion_run = client.get_run(champion.run_id)
    scored = client.search_runs([experiment.experiment_id], "tags.kind = 'candidate' and "
                                "tags.state = 'ok'", order_by=["metrics.speedup_vs_champion DESC"])
    assert scored, "the campaign recorded no valid candidate"
    best = scored[0]
    speedup = best.data.metrics["speedup_vs_champion"]
    shots = _artifacts_dir()
    proc, url = _start_ui(campaign, tmp_path / "ui.log")
    chrome = None
    try:
        log = (tmp_path / "ui.log").read_text()
        runs = (f"{url}/#/experiments/{experiment.experiment_id}/runs?orderByKey="
                "metrics.%60speedup_vs_champion%60&orderByAsc=false")
        assert runs in log  # the links the command prints are the pages checked here
        assert f"{url}/#/models/specpilot-{SETTING}/versions/{champion.version}" in log
        chrome = _chrome(*_browser())
        _page(chrome, runs, [f"specpilot/{SETTING}", "Sort: speedup_vs_champion",
                             *[r.info.run_name for r in scored]], shots / "1-runs.png")
        _page(chrome, f"{url}/#/experiments/{experiment.experiment_id}/runs/{best.info.run_id}",
              [best.info.run_name, "speedup_vs_champion", "speedup_ci_low", repr(speedup)[:5]],
              shots / "2-best-candidate.png")
        # every valid candidate side by side: the speedup_vs_champion row, in run order
        ids = urllib.parse.quote(json.dumps([r.info.run_id for r in scored]))
        compare = (f"{url}/#/compare-runs?runs={ids}&experiments="
                   f"{urllib.parse.quote(json.dumps([experiment.experiment_id]))}")
        row = "\n".join(_shown(r.data.metrics["speedup_vs_champion"]) for r in scored)
        _page(chrome, compare, [*[r.info.run_name for r in scored], row],
              shots / "3-compare-candidates.png", scroll_to="Metrics")
        assert "speedup_vs_champion" in chrome.page_source
        _page(chrome, f"{url}/#/models/specpilot-{SETTING}",
              [f"specpilot-{SETTING}", f"Version {champion.version}", "@ champion"],
              shots / "4-registered-model.png")
        _page(chrome, f"{url}/#/models/specpilot-{SETTING}/versions/{champion.version}",
              ["Source Run", champion_run.info.run_name, "champion"],
              shots / "5-champion-version.png")
    finally:
        if chrome is not None:
            chrome.quit()
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.returncode == 0
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(OSError):  # the mlflow server went down with the command
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert all((shots / name).stat().st_size > 0 for name in (
        "1-runs.png", "2-best-candidate.png", "3-compare-candidates.png", "4-registered-model.png",
        "5-champion-version.png"))
