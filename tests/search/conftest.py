"""Campaign tests: real Ray (local, logical GPUs), real MLflow (SQLite), real Optuna journal."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def campaign_config(tmp_path: Path, **overrides) -> Path:
    """A small campaign config file for ``cpu_c1_tiny``-like settings (CPU, tiny budgets)."""
    values = {"rounds": 1, "num_workers": 2, "proposals_per_agent": 2, "validation_prompts": 2,
              "validation_tokens": 16, "bench_prompts": 2, "bench_tokens": 16,
              "compare_half_width": 0.05, "compare_budget_s": 6.0, "compare_max_rounds": 4,
              "trial_timeout_s": 300.0, "kernel_trials": 0, "kernel_reps": 1, **overrides}
    lines = []
    tables = {k: v for k, v in values.items() if isinstance(v, dict)}
    for key, value in values.items():
        if key not in tables:
            lines.append(f"{key} = {_toml(value)}")
    for key, value in tables.items():
        lines.append(f"{key} = {{ {', '.join(f'{k} = {_toml(v)}' for k, v in value.items())} }}")
    path = tmp_path / "campaign.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def run_search(args: list[str], env_extra: dict | None = None, timeout_s: float = 600,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "specpilot.search", *args], cwd=cwd or "/",
                          env=env, capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture
def ray_shutdown():
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


def mlflow_client(store: Path):
    from specpilot.search.records import mlflow_client as open_client

    return open_client(f"sqlite:///{store / 'mlflow.db'}")  # locked while a driver creates it


def campaign_runs(store: Path, setting: str) -> list:
    client = mlflow_client(store)
    experiment = client.get_experiment_by_name(f"specpilot/{setting}")
    return client.search_runs([experiment.experiment_id], "tags.kind != 'campaign'",
                              max_results=1000)
