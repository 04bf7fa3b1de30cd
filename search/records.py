"""MLflow records of a campaign; the driver is their only writer.

Layout: one experiment per setting (``specpilot/<setting>``); one parent run per campaign (tag
``campaign_id``); one child run per trial attempt with the recipe as params and as
``engine/recipe.json``, the speedup and its CI, tau, per-phase times and validation counts as
metrics, the fingerprint and the verdict as tags, the full result as ``trial/result.json`` and a
speedup plot. Run status: FINISHED = a verdict (valid or invalid), FAILED = the candidate crashed,
hung or errored, KILLED = its worker died (the driver re-runs it elsewhere). The champion is the
registered model ``specpilot-<setting>`` with alias ``champion``.

A restarted driver reads the FINISHED and FAILED child runs back (``done_trials``) and skips them.
"""

import json
import math
import tempfile
import time
from pathlib import Path

from specpilot.errors import SpecPilotError

STATUS = {"ok": "FINISHED", "invalid": "FINISHED", "measured": "FINISHED", "error": "FAILED",
          "crashed": "FAILED", "timeout": "FAILED", "worker_lost": "KILLED"}
FINGERPRINT_TAGS = ("gpu", "compute_capability", "driver", "cuda", "torch", "triton", "commit")


def experiment_name(setting: str) -> str:
    return f"specpilot/{setting}"


def model_name(setting: str) -> str:
    return f"specpilot-{setting}"


def check_tracking_uri(uri: str) -> None:
    """Fail at once (before any GPU time) when the tracking store cannot be reached."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SpecPilotError(f"MLflow store {uri}: cannot create {path.parent}: "
                                 f"{err}") from err
        return
    if uri.startswith(("http://", "https://")):
        import urllib.request

        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5).read()
        except OSError as err:
            raise SpecPilotError(f"MLflow tracking server {uri} is unreachable: {err}") from err
        return
    raise SpecPilotError(f"unsupported MLflow tracking URI {uri!r} (sqlite:///PATH or http(s)://)")


def mlflow_client(tracking_uri: str):
    """An ``MlflowClient`` for runs and the model registry on ``tracking_uri``, its store ready.

    MLflow creates and migrates a SQLite store's tables the first time a process uses it, and two
    processes doing that at once collide (``table _alembic_tmp_metrics already exists``: a
    campaign driver starting while a reader, the UI or a test, polls its store). So for a SQLite
    store that first use runs under an exclusive lock on a file next to the database; every
    SpecPilot process opens its stores through here."""
    from mlflow.tracking import MlflowClient

    if not tracking_uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    import fcntl

    db = Path(tracking_uri[len("sqlite:///"):])
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        lock = open(db.with_name(db.name + ".init-lock"), "a")  # noqa: SIM115
    except OSError:  # a read-only store directory: no process can create tables there either
        return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
        client.search_experiments(max_results=1)  # the tracking store: creates or migrates
        client.search_registered_models(max_results=1)  # the registry store, same database
    return client


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class CampaignRecords:
    def __init__(self, tracking_uri: str, artifact_dir: Path, setting: str, campaign_id: str,
                 config: dict):
        check_tracking_uri(tracking_uri)
        self.client = mlflow_client(tracking_uri)
        self.setting, self.campaign_id = setting, campaign_id
        name = experiment_name(setting)
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            artifact_dir.mkdir(parents=True, exist_ok=True)
            self.experiment_id = self.client.create_experiment(
                name, artifact_location=artifact_dir.resolve().as_uri(),
                tags={"setting": setting})
        else:
            self.experiment_id = experiment.experiment_id
        runs = self.client.search_runs(
            [self.experiment_id],
            f"tags.campaign_id = '{campaign_id}' and tags.kind = 'campaign'", max_results=1)
        if runs:
            self.parent_id, self.resumed = runs[0].info.run_id, True
            self.client.update_run(self.parent_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=campaign_id, tags={
                "campaign_id": campaign_id, "kind": "campaign", "setting": setting})
            self.parent_id, self.resumed = run.info.run_id, False
            self.client.log_dict(self.parent_id, config, "campaign/config.json")

    # --- reading back -------------------------------------------------------------------------
    def child_runs(self) -> list:
        out, token = [], None
        while True:
            page = self.client.search_runs(
                [self.experiment_id], f"tags.campaign_id = '{self.campaign_id}' and "
                "tags.kind != 'campaign'", max_results=1000, page_token=token)
            out.extend(page)
            token = page.token
            if not token:
                return out

    def done_trials(self) -> dict[str, dict]:
        """trial_key -> stored result of every FINISHED or FAILED attempt (a final state)."""
        done = {}
        for run in self.child_runs():
            if run.info.status not in ("FINISHED", "FAILED"):
                continue
            key = run.data.tags.get("trial_key")
            if key is None:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                path = self.client.download_artifacts(run.info.run_id, "trial/result.json", tmp)
                result = json.loads(Path(path).read_text())
            done[key] = {**result, "run_id": run.info.run_id}
        return done

    # --- writing ------------------------------------------------------------------------------
    def log_trial(self, key: str, kind: str, round_: int, proposal: dict | None,
                  recipe: dict | None, result: dict) -> str:
        """One child run for one attempt; returns its run id."""
        from mlflow.entities import Metric
        from mlflow.entities import Param
        from mlflow.entities import RunTag

        state = result.get("state", "error")
        name = (proposal or {}).get("mechanism") or kind
        validation = result.get("validation") or {}
        status = ("not_run" if not validation else
                  "passed" if validation.get("passed") else "failed")
        tags = {"mlflow.parentRunId": self.parent_id, "campaign_id": self.campaign_id,
                "setting": self.setting, "kind": kind, "trial_key": key, "round": str(round_),
                "state": state, "validation_status": status,
                "valid": str(state == "ok" and status == "passed").lower()}
        if proposal:
            tags.update({"mechanism": proposal["mechanism"], "agent": proposal["agent"],
                         "delta": json.dumps(proposal["delta"], sort_keys=True)[:4000]})
            if proposal.get("fault"):
                tags["fault"] = proposal["fault"]
        if state in ("error", "crashed", "timeout", "worker_lost"):
            tags["failure_kind"] = state
            tags["error"] = str(result.get("error", ""))[:4000]
        worker = result.get("worker") or {}
        tags.update({f"worker.{k}": str(v) for k, v in worker.items() if v is not None})
        device = result.get("device") or {}
        tags.update({f"device.{k}": str(v) for k, v in device.items() if v})
        fp = result.get("fingerprint") or {}
        tags.update({f"fp.{k}": str(fp[k]) for k in FINGERPRINT_TAGS if k in fp})
        run = self.client.create_run(self.experiment_id, run_name=f"r{round_}:{name}", tags=tags)
        run_id = run.info.run_id
        params = [Param(k, json.dumps(v) if not isinstance(v, str) else v)
                  for k, v in (recipe or {}).items()]
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, 0) for k, v in _metrics(result).items() if _num(v)]
        self.client.log_batch(run_id, metrics=metrics, params=params[:100],
                              tags=[RunTag("recipe_summary", _summary(recipe, proposal))])
        if recipe is not None:
            self.client.log_dict(run_id, recipe, "engine/recipe.json")
        self.client.log_dict(run_id, result, "trial/result.json")
        compare = result.get("compare")
        if compare and compare.get("ratios"):
            self._plot(run_id, compare, name)
        self.client.set_terminated(run_id, status=STATUS.get(state, "FAILED"))
        return run_id

    def _plot(self, run_id: str, compare: dict, title: str) -> None:
        from specpilot.bench.plots import speedup_ci

        with tempfile.TemporaryDirectory() as tmp:
            path = speedup_ci(compare, Path(tmp) / "speedup.png", f"{title} vs champion")
            self.client.log_artifact(run_id, str(path), "plots")

    def log_event(self, kind: str, data: dict) -> None:
        """A campaign-level artifact (gap table, rejected LLM answers, kernel study summary)."""
        self.client.log_dict(self.parent_id, data,
                             f"campaign/{kind}-{time.time_ns()}.json")

    def set_champion(self, run_id: str, recipe: dict, summary: dict) -> str:
        """Register ``run_id``'s engine as a new model version and point ``champion`` at it."""
        from mlflow.exceptions import MlflowException

        name = model_name(self.setting)
        try:
            self.client.create_registered_model(name, tags={"setting": self.setting})
        except MlflowException:
            pass  # already registered
        previous = self.client.get_run(self.parent_id).data.tags.get("champion_run_id")
        if previous and previous != run_id:
            self.client.set_tag(previous, "champion", "false")
        self.client.set_tag(run_id, "champion", "true")
        run = self.client.get_run(run_id)
        summary = {**summary, "validation_status": run.data.tags.get("validation_status", ""),
                   "stack": "|".join(run.data.tags.get(f"fp.{k}", "") for k in
                                     FINGERPRINT_TAGS[:-1])}
        existing = self.client.search_model_versions(f"name='{name}' and run_id='{run_id}'")
        if existing:  # a resumed campaign replaying its rounds: the same version again
            version = max(existing, key=lambda v: int(v.version))
            self.client.set_registered_model_alias(name, "champion", version.version)
            return version.version
        version = self.client.create_model_version(
            name, source=f"{run.info.artifact_uri}/engine", run_id=run_id,
            tags={k: str(v) for k, v in summary.items()},
            description=f"campaign {self.campaign_id}: {recipe.get('name')}")
        self.client.set_registered_model_alias(name, "champion", version.version)
        self.client.set_tag(self.parent_id, "champion_run_id", run_id)
        return version.version

    def tag_champion(self, tags: dict) -> None:
        """Add tags (e.g. the speedup over stock with its CI) to the current champion version."""
        from mlflow.exceptions import MlflowException

        try:
            version = self.client.get_model_version_by_alias(model_name(self.setting), "champion")
        except MlflowException:
            return
        for key, value in tags.items():
            self.client.set_model_version_tag(model_name(self.setting), version.version, key,
                                              str(value))

    def champion(self) -> tuple[dict, str] | None:
        """(recipe, run id) of the setting's ``champion`` alias, or None."""
        from mlflow.exceptions import MlflowException

        try:
            version = self.client.get_model_version_by_alias(model_name(self.setting), "champion")
        except MlflowException:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            path = self.client.download_artifacts(version.run_id, "engine/recipe.json", tmp)
            return json.loads(Path(path).read_text()), version.run_id

    def finish(self, summary: dict, status: str = "FINISHED") -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, 0) for k, v in summary.items() if _num(v)]
        self.client.log_batch(self.parent_id, metrics=metrics)
        self.client.log_dict(self.parent_id, summary, "campaign/summary.json")
        self.client.set_terminated(self.parent_id, status=status)


def _metrics(result: dict) -> dict:
    out = {"elapsed_s": result.get("elapsed_s")}
    compare = result.get("compare") or {}
    ci = compare.get("ci95") or [None, None]
    out.update({"speedup_vs_champion": compare.get("median_speedup"), "speedup_ci_low": ci[0],
                "speedup_ci_high": ci[1], "speedup_half_width": compare.get("half_width"),
                "ms_per_token": compare.get("ms_per_token") or result.get("ms_per_token"),
                "champion_ms_per_token": compare.get("champion_ms_per_token"),
                "tau": compare.get("tau") or result.get("tau")})
    for k in ("speedup_vs_stock", "speedup_vs_stock_ci_low", "speedup_vs_stock_ci_high"):
        out[k] = result.get(k)
    validation = result.get("validation") or {}
    out.update({"validation_mismatches": validation.get("num_mismatches"),
                "validation_tokens": validation.get("num_tokens")})
    for phase, ms in (result.get("phases_ms") or {}).items():
        out[f"phase_{phase}_ms"] = ms
    return out


def _summary(recipe: dict | None, proposal: dict | None) -> str:
    if proposal:
        return f"{proposal['mechanism']}: {json.dumps(proposal['delta'], sort_keys=True)}"[:4000]
    return (recipe or {}).get("name", "")
