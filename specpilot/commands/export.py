"""``specpilot export SETTING --out DIR``: write a self-contained engine bundle (DESIGN.md §8).

The exported engine is a run of the setting's MLflow experiment: the ``--alias`` model version
(default ``champion``) or ``--run RUN_ID``. Only a run that finished ``ok`` and carries an engine
recipe can be exported. The bundle (layout in :mod:`specpilot.bundle`) holds the recipe, the tuned
kernel configs of the setting's shapes on the run's stack (from ``$SPECPILOT_CACHE_DIR``), the
token-forcing report, the bench record, the fingerprint and the setting with pinned checkpoints.

A run that was measured but never token-forced (a campaign's starting champion) is token-forced
here first, with the campaign's validation budget; its bundle then carries this machine's
fingerprint. Example::

    specpilot search cpu_c1_tiny --store-dir runs/
    specpilot export cpu_c1_tiny --store-dir runs/ --out bundles/cpu_c1_tiny
    specpilot serve --bundle bundles/cpu_c1_tiny
"""

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    out: Annotated[str, "bundle directory to create (must not exist or be empty)"]
    run: Annotated[str | None, "MLflow run id of the engine (default: the --alias version)"] = None
    alias: Annotated[str | None, "model alias of specpilot-SETTING to export (default: "
                     "champion)"] = None
    store_dir: Annotated[str | None, "campaign store directory (default: "
                         "$SPECPILOT_HOME/campaigns)"] = None
    tracking_uri: Annotated[str | None, "MLflow tracking URI instead of --store-dir"] = None

    def __post_init__(self):
        if self.run and self.alias:
            raise ValueError("give --run or --alias, not both")
        if self.store_dir and self.tracking_uri:
            raise ValueError("give --store-dir or --tracking-uri, not both")


def _source_run(store, args: Args):
    """(run, registered version or None) named by ``--run`` or ``--alias``."""
    from mlflow.exceptions import MlflowException

    from specpilot import bundle
    from specpilot.errors import SpecPilotError

    version = None
    run_id = args.run
    if run_id is None:
        version = bundle.champion_version(store, args.alias or "champion")
        run_id = version.run_id
    try:
        run = store.client.get_run(run_id)
    except MlflowException:
        raise SpecPilotError(f"no MLflow run {run_id!r} in {store.tracking_uri}") from None
    if run.info.experiment_id != store.experiment_id:
        raise SpecPilotError(f"run {run_id} belongs to another experiment, not "
                             f"specpilot/{args.setting}")
    state = run.data.tags.get("state")
    if state != "ok":
        raise SpecPilotError(f"run {run_id} ({run.info.run_name}) is {state!r}; only a run that "
                             "finished 'ok' can be exported")
    return run, version


def _bench_record(run, result: dict) -> dict:
    keep = ("ms_per_token", "tau", "phases_ms", "acceptance", "block_size", "elapsed_s")
    return {"run_id": run.info.run_id, "run_name": run.info.run_name,
            "kind": run.data.tags.get("kind"), "compare": result.get("compare"),
            "measurement": {k: result[k] for k in keep if k in result},
            "metrics": dict(run.data.metrics), "fingerprint": result.get("fingerprint")}


def run(args: Args) -> int:
    from specpilot import bundle
    from specpilot.errors import SpecPilotError
    from specpilot.recipe import Recipe
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    store = bundle.open_store(args.setting, args.store_dir, args.tracking_uri)
    run_, version = _source_run(store, args)
    run_id = run_.info.run_id
    recipe_dict = bundle.run_json(store, run_id, "engine/recipe.json")
    result = bundle.run_json(store, run_id, "trial/result.json")
    if recipe_dict is None or result is None:
        raise SpecPilotError(f"run {run_id} has no engine/recipe.json or trial/result.json: "
                             "not an engine run")
    recipe = Recipe.from_dict(recipe_dict)
    fingerprint = result.get("fingerprint") or bundle.run_fingerprint(run_)
    budget = bundle.validation_budget(setting, bundle.campaign_config(store, run_))
    if result.get("validation"):
        validation = {"report": result["validation"], "budget": budget,
                      "fingerprint": fingerprint, "validated_at": f"run {run_id}"}
    else:
        validation = _validate_here(setting, recipe, budget, run_id)
        if not validation["report"]["passed"]:
            print(f"FAIL {recipe.name} (run {run_id}) fails token forcing here; not exported:",
                  file=sys.stderr)
            for failure in validation["report"]["failures"]:
                print(f"  - {failure}", file=sys.stderr)
            return 1
        fingerprint = validation["fingerprint"]
    kernels = bundle.kernel_entries(fingerprint, bundle.linear_shapes(setting))
    source = {"tracking_uri": store.tracking_uri, "experiment": f"specpilot/{args.setting}",
              "run_id": run_id, "run_name": run_.info.run_name,
              "model": version.name if version else None,
              "model_version": version.version if version else None,
              "alias": (args.alias or "champion") if version else None}
    manifest = bundle.write_bundle(Path(args.out), setting=setting, recipe=recipe,
                                   fingerprint=fingerprint, validation=validation,
                                   bench=_bench_record(run_, result), kernels=kernels,
                                   source=source)
    named = f"{version.name} v{version.version}" if version else "run"
    print(f"exported {args.setting} {recipe.name} ({named} {run_id}) to {args.out}")
    print(f"  {len(manifest['files'])} files, {len(kernels)} tuned kernel config(s), validated "
          f"on {bundle.kernel_key(fingerprint)}")
    print(f"  manifest digest {manifest['digest']}")
    return 0


def _validate_here(setting, recipe, budget: dict, run_id: str) -> dict:
    """Token forcing on this machine for a run that was measured but never token-forced."""
    from specpilot import bundle
    from specpilot.build import load_models
    from specpilot.commands.serve import place

    print(f"run {run_id} carries no token-forcing report: validating {recipe.name} here "
          f"({budget['num_prompts']} prompts x {budget['max_new_tokens']} tokens)", flush=True)
    models = load_models(place(setting, None), with_drafter=recipe.speculative)
    return bundle.token_force(models, recipe, budget)
