"""The fields every result record starts with, and publishing a record (store + plots + JSON).

Common fields: ``kind`` (bench | compare | score | validate), ``run_id``, ``timestamp`` (Unix
seconds), ``setting``, ``setting_hash``, ``engine``, ``recipe``, ``recipe_hash`` and the
environment ``fingerprint`` (GPU SKU and compute capability, driver, CUDA, torch, Triton, Python,
commit).
"""

import json
import time
import uuid
from pathlib import Path

from specpilot.bench import plots
from specpilot.bench import store


def header(kind: str, setting, engine: str | None = None, recipe=None,
           fingerprint: dict | None = None) -> dict:
    """The common fields of a record (fingerprint default: this process, the setting's device)."""
    if fingerprint is None:
        from specpilot import fingerprint as fp

        fingerprint = fp.current(setting.engine.device).to_dict()
    return {
        "kind": kind,
        "run_id": uuid.uuid4().hex[:12],
        "timestamp": time.time(),
        "setting": setting.name,
        "setting_hash": setting.hash(),
        "engine": engine,
        "recipe": recipe.to_dict() if recipe is not None else None,
        "recipe_hash": recipe.hash() if recipe is not None else None,
        "fingerprint": fingerprint,
    }


def publish(record: dict, results_dir: str | Path | None = None,
            json_path: str | Path | None = None) -> dict:
    """Write the record's plots, append it to the store and (optionally) save it as JSON.

    Returns the record with ``plots`` (paths) and ``store_path`` filled in.
    """
    results_dir = Path(results_dir) if results_dir is not None else store.default_results_dir()
    written = plots.plots_for(record, results_dir / "plots" / record["run_id"])
    record["plots"] = [str(p) for p in written]
    record["store_path"] = str(store.append(record, results_dir))
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(record, indent=1) + "\n")
    return record


def validation_record(report, setting, engine: str, recipe=None, ran_on=None) -> dict:
    """A ``validate`` record from a token-forcing ``Report`` (``specpilot.validation``) for
    ``setting``; ``ran_on``: the setting token forcing ran (its validation twin), default itself."""
    body = report.to_dict()
    ran_on = ran_on or setting
    depth = ran_on.validation.depth if ran_on is not setting else None
    return {**header("validate", setting, engine, recipe), "dtype": ran_on.engine.dtype,
            "depth": depth,  # a cut twin's target layers (None: the setting's own models)
            "acceptance": "measured",
            "passed": body["passed"], "tau": body["tau"], "report": body}
