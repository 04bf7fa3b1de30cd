"""``specpilot retune SETTING``: keep the champion honest after a stack change (DESIGN.md §8).

Compares this machine's fingerprint with the champion's (the ``fp.*`` tags of the run behind
``specpilot-SETTING@champion``). When a field that keys tuned kernel configs changed (GPU SKU,
compute capability, driver, CUDA, torch, triton; ``--force`` acts as if one had):

1. re-tunes every tuned kernel config of the setting's weight shapes that was measured on the old
   stack (Optuna, ``kernel_trials`` checked trials each, journal in the store; under
   ``TRITON_INTERPRET=1`` on a CPU setting). This runs first, so that what is validated and
   benched next is the engine exactly as it will run with the new configs;
2. token-forces the champion against the AR engine on this stack (the campaign's budget);
3. when it passes, benchmarks it against stock, interleaved A/B (a stock champion gives the null
   comparison: it measures the noise floor);
4. records a run of kind ``retune`` in the setting's experiment (new and old fingerprint as
   ``fp.*`` / ``fp_old.*`` tags, the report, the compare block and its plot). A valid champion gets
   a new model version that takes the ``champion`` alias; an invalid one keeps the alias on the old
   version, tagged with why.

Budgets come from the champion's campaign config (its ``campaign/config.json``), else ``--config``
or the setting's ``campaign.toml``. Exit codes: 0 = nothing to do (stack unchanged), 10 = re-tuned
and re-recorded (new champion version), 1 = the champion fails token forcing on this stack, 2 = bad
input (unknown setting, no records, no champion). ``docs/retune.md`` has a cron and a CI recipe.
"""

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Annotated

from specpilot.cli import Positional

EXIT_UNCHANGED, EXIT_RETUNED, EXIT_INVALID = 0, 10, 1


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    store_dir: Annotated[str | None, "campaign store directory (default: "
                         "$SPECPILOT_HOME/campaigns)"] = None
    tracking_uri: Annotated[str | None, "MLflow tracking URI instead of --store-dir"] = None
    config: Annotated[str | None, "campaign config (TOML/JSON) for the budgets; default: the "
                      "champion's campaign config"] = None
    force: Annotated[bool, "re-validate, re-tune and re-bench even if the stack is unchanged"] = \
        False
    json: Annotated[str | None, "write the outcome as JSON to this path"] = None

    def __post_init__(self):
        if self.store_dir and self.tracking_uri:
            raise ValueError("give --store-dir or --tracking-uri, not both")


def _config(args: Args, store, run, setting):
    from specpilot import bundle
    from specpilot.search.config import CampaignConfig

    if args.config:
        return CampaignConfig.load(args.config, setting=args.setting)
    recorded = bundle.campaign_config(store, run)
    if recorded is not None:
        return CampaignConfig.from_dict({**recorded, "setting": args.setting})
    path = setting.directory / "campaign.toml"
    if path.is_file():
        return CampaignConfig.load(path, setting=args.setting)
    return CampaignConfig(setting=args.setting)


def run(args: Args) -> int:
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    if not setting.engine.device.startswith("cuda"):
        # Kernels tune in the Triton interpreter on CPU; it must be chosen before triton loads.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from specpilot import bundle
    from specpilot.commands.serve import place
    from specpilot.errors import SpecPilotError
    from specpilot.fingerprint import current
    from specpilot.recipe import Recipe

    store = bundle.open_store(args.setting, args.store_dir, args.tracking_uri)
    version = bundle.champion_version(store)
    champion_run = store.client.get_run(version.run_id)
    recipe_dict = bundle.run_json(store, version.run_id, "engine/recipe.json")
    if recipe_dict is None:
        raise SpecPilotError(f"champion run {version.run_id} has no engine/recipe.json")
    recipe = Recipe.from_dict(recipe_dict)
    setting_here = place(setting, None)
    old = bundle.run_fingerprint(champion_run)
    new = current(setting_here.engine.device).to_dict()
    changes = bundle.stack_changes(old, new)
    print(f"champion of {args.setting}: {recipe.name} ({version.name} v{version.version}, run "
          f"{version.run_id})")
    if not changes and not args.force:
        print(f"  stack unchanged ({bundle.kernel_key(new)}): nothing to do")
        _write_json(args.json, {"outcome": "unchanged", "fingerprint": new})
        return EXIT_UNCHANGED
    print(f"  stack changed: {bundle.describe_changes(changes) or 'none (--force)'}")
    config = _config(args, store, champion_run, setting)
    outcome = {"changes": changes, "old_fingerprint": old, "fingerprint": new,
               "previous_version": version.version, "previous_run_id": version.run_id}
    outcome["kernels"] = _retune_kernels(setting, recipe, old, config, store, args.force)
    from specpilot.build import load_models

    models = load_models(setting_here)
    models.setting = setting
    budget = bundle.validation_budget(setting, config.to_dict())
    print(f"  token forcing: {budget['num_prompts']} prompts x {budget['max_new_tokens']} tokens",
          flush=True)
    validation = bundle.token_force(models, recipe, budget)
    report = validation["report"]
    outcome["validation"] = report
    if report["passed"]:
        print(f"  PASS: {report['num_tokens']} tokens, {report['num_mismatches']} mismatches")
        outcome["compare"] = _bench(models, recipe, config)
        ci = outcome["compare"]["ci95"]
        print(f"  vs stock: {outcome['compare']['median_speedup']:.3f}x, 95% CI "
              f"[{ci[0]:.3f}, {ci[1]:.3f}] (interleaved A/B)")
    else:
        print(f"  FAIL: {'; '.join(report['failures'])}")
    run_id, new_version = _record(store, setting, version, champion_run, recipe, config, outcome)
    outcome.update(run_id=run_id, new_version=new_version,
                   outcome="retuned" if report["passed"] else "invalid")
    if report["passed"]:
        print(f"  recorded: run {run_id}; {version.name} v{new_version} is the champion now")
    else:
        print(f"  recorded: run {run_id}; the champion alias stays on v{version.version}, which "
              "is invalid on this stack")
    _write_json(args.json, outcome)
    return EXIT_RETUNED if report["passed"] else EXIT_INVALID


def _write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2, default=str))


def _retune_kernels(setting, recipe, old: dict, config, store, force: bool) -> dict:
    """Re-tune each tuned config of the setting's shapes measured on the old stack."""
    from specpilot import bundle

    used = recipe.gemm == "triton" or bool(recipe.w12)
    stale = bundle.kernel_entries(old, bundle.linear_shapes(setting))
    if not stale:
        return {"status": "skipped", "used_by_champion": used, "tuned": [],
                "reason": "no tuned kernel configs of this setting's shapes on the old stack"}
    if config.kernel_trials == 0:
        return {"status": "skipped", "used_by_champion": used, "tuned": [],
                "reason": "kernel_trials = 0 in the campaign config"}
    from specpilot.kernels.tuning.study import tune

    device = "cuda" if setting.engine.device.startswith("cuda") else "cpu"
    storage = str(store.directory / "optuna.journal") if store.directory else None
    tuned = []
    for key in sorted(stale):
        op, n, k, bucket = bundle.entry_shape(key)
        m = stale[key].get("m") or bucket
        print(f"  re-tuning {op} N={n} K={k} M={m} ({config.kernel_trials} trials)", flush=True)
        result = tune(op, n, k, [m], trials=config.kernel_trials, device=device,
                      seed=config.seed, storage=storage, force=force, reps=config.kernel_reps,
                      log=lambda line: print(f"    {line}", flush=True))[0]
        tuned.append({"op": op, "n": n, "k": k, "m": m, "old_key": key,
                      "new_key": result.cache_key, "old_config": stale[key].get("config"),
                      "config": result.config, "from_cache": result.from_cache,
                      "p50_us": result.timing.p50_us if result.timing else None,
                      "num_ok": result.num_ok, "num_failed": result.num_failed})
    status = "retuned" if all(t["config"] is not None for t in tuned) else "partial"
    return {"status": status, "used_by_champion": used, "tuned": tuned}


def _bench(models, recipe, config) -> dict:
    """The champion (B) against stock (A), interleaved, with the campaign's stopping rule."""
    import statistics

    from specpilot.bench import StoppingRule
    from specpilot.bench import compare_engines
    from specpilot.bench import replay_for
    from specpilot.bench import workload_for
    from specpilot.recipe import STOCK

    workload = workload_for(models.setting, models.tokenizer, num_prompts=config.bench_prompts,
                            max_new_tokens=config.bench_tokens)
    replay = replay_for(models, workload) if models.setting.scenario.acceptance_profile else None
    rule = StoppingRule(config.compare_half_width, config.compare_budget_s,
                        min(2, config.compare_max_rounds), config.compare_max_rounds)
    body = compare_engines(models.engine(STOCK), models.engine(recipe), workload, rule, replay,
                           seed=config.seed)
    out = {k: body[k] for k in ("median_speedup", "ci95", "half_width", "num_rounds",
                                "stop_reason", "acceptance", "ratios")}
    out["stock_ms_per_token"] = statistics.median(p["a_ms_per_token"] for p in body["pairs"])
    out["ms_per_token"] = statistics.median(p["b_ms_per_token"] for p in body["pairs"])
    taus = [p["b_tau"] for p in body["pairs"] if p["b_tau"]]
    out["tau"] = statistics.median(taus) if taus else None
    return out


def _record(store, setting, version, champion_run, recipe, config, outcome: dict):
    """The ``retune`` run, and the new champion version when the champion stayed valid."""
    from mlflow.entities import Metric
    from mlflow.entities import Param
    from mlflow.entities import RunTag

    from specpilot import bundle
    from specpilot.search.records import model_name

    client, valid = store.client, outcome["validation"]["passed"]
    compare = outcome.get("compare") or {}
    tags = {"kind": "retune", "setting": setting.name, "state": "ok" if valid else "invalid",
            "valid": str(valid).lower(), "validation_status": "passed" if valid else "failed",
            "previous_champion_run_id": version.run_id,
            "previous_champion_version": str(version.version),
            "stack_changes": json.dumps(outcome["changes"], sort_keys=True)[:4000],
            "kernels": outcome["kernels"]["status"], "recipe_summary": recipe.name}
    tags.update({f"fp.{k}": str(v) for k, v in outcome["fingerprint"].items()})
    tags.update({f"fp_old.{k}": str(v) for k, v in outcome["old_fingerprint"].items()})
    run = client.create_run(store.experiment_id, run_name=f"retune:{recipe.name}",
                            tags={k: v for k, v in tags.items() if k != "recipe_summary"})
    run_id = run.info.run_id
    report = outcome["validation"]
    ci = compare.get("ci95") or [None, None]
    values = {"speedup_vs_stock": compare.get("median_speedup"), "speedup_vs_stock_ci_low": ci[0],
              "speedup_vs_stock_ci_high": ci[1], "speedup_half_width": compare.get("half_width"),
              "ms_per_token": compare.get("ms_per_token"),
              "stock_ms_per_token": compare.get("stock_ms_per_token"), "tau": compare.get("tau"),
              "validation_mismatches": report["num_mismatches"],
              "validation_tokens": report["num_tokens"],
              "kernels_retuned": len(outcome["kernels"]["tuned"])}
    now_ms = int(time.time() * 1000)
    metrics = [Metric(k, float(v), now_ms, 0) for k, v in values.items() if v is not None]
    params = [Param(k, v if isinstance(v, str) else json.dumps(v))
              for k, v in recipe.to_dict().items()]
    client.log_batch(run_id, metrics=metrics, params=params,
                     tags=[RunTag("recipe_summary", recipe.name)])
    result = {"state": tags["state"], "validation": report, "compare": outcome.get("compare"),
              "fingerprint": outcome["fingerprint"], "kernels": outcome["kernels"],
              "changes": outcome["changes"], "previous_run_id": version.run_id}
    client.log_dict(run_id, recipe.to_dict(), "engine/recipe.json")
    client.log_dict(run_id, result, "trial/result.json")
    client.log_dict(run_id, config.to_dict(), "campaign/config.json")
    if compare.get("ratios"):
        from specpilot.bench.plots import speedup_ci

        with tempfile.TemporaryDirectory() as tmp:
            path = speedup_ci(compare, Path(tmp) / "speedup.png", f"retune {recipe.name} vs stock")
            client.log_artifact(run_id, str(path), "plots")
    client.set_terminated(run_id, status="FINISHED")
    name = model_name(setting.name)
    stack = bundle.kernel_key(outcome["fingerprint"])
    if not valid:
        why = f"invalid on {stack} (retune run {run_id}): {'; '.join(report['failures'])}"
        client.set_model_version_tag(name, version.version, "retune", why[:4000])
        return run_id, None
    new = client.create_model_version(
        name, source=f"{run.info.artifact_uri}/engine", run_id=run_id,
        tags={"mechanism": "retune", "previous_version": str(version.version),
              "validation_status": "passed", "stack": stack,
              "speedup_vs_stock": str(compare.get("median_speedup"))},
        description=f"retune of v{version.version} ({recipe.name}) on {stack}")
    client.set_registered_model_alias(name, "champion", new.version)
    client.set_tag(run_id, "champion", "true")
    client.set_tag(champion_run.info.run_id, "champion", "false")
    return run_id, new.version
