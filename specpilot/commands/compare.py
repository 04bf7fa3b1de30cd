"""``specpilot compare speed SETTING --a E --b E`` or ``specpilot compare speed A.json B.json``.

Setting form: interleaved A/B on this device over the setting's prompts (warm-up first), per-prompt
paired ratios A_time / B_time (> 1: B is faster), median speedup with a bootstrap 95% CI; stops at
the CI half-width target, the time budget or the round limit. JSON form: the same statistics over
two saved ``specpilot bench --json`` records of the same prompts (not interleaved).
"""

import dataclasses
import json
from pathlib import Path
from typing import Annotated
from typing import Literal

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    mode: Annotated[Literal["speed"], Positional, "what to compare"]
    first: Annotated[str, Positional, "a setting (with --a and --b), or saved bench JSON A"]
    second: Annotated[str | None, Positional, "saved bench JSON B (JSON form only)"] = None
    a: Annotated[str | None, "engine A, the baseline (setting form)"] = None
    b: Annotated[str | None, "engine B, the candidate (setting form)"] = None
    target_half_width: Annotated[float, "stop when the half-width of the 95-percent CI is at "
                                 "most this"] = 0.02
    time_budget_s: Annotated[float, "stop after this many seconds of A/B runs"] = 600.0
    min_rounds: Annotated[int, "rounds over all prompts before the CI may stop the run"] = 2
    max_rounds: Annotated[int, "stop after this many rounds"] = 20
    dataset: Annotated[str | None, "bundled prompt set (default: the setting's)"] = None
    num_prompts: Annotated[int | None, "number of prompts (default: the setting's)"] = None
    max_new_tokens: Annotated[int | None, "tokens per prompt (default: the setting's)"] = None
    ignore_eos: Annotated[bool, "generate max-new-tokens for every prompt"] = True
    warmup: Annotated[bool, "warm both engines up first"] = True
    seed: Annotated[int, "bootstrap seed"] = 0
    json: Annotated[str | None, "also write the record as JSON to this path"] = None
    results_dir: Annotated[str | None, "results store (default: $SPECPILOT_RESULTS_DIR or "
                           "experiments/results)"] = None

    def __post_init__(self):
        if self.second is not None and (self.a or self.b):
            raise ValueError("give two saved JSON files, or a setting with --a and --b, not both")
        if self.second is None and not (self.a and self.b):
            raise ValueError("compare speed SETTING needs --a and --b (or give two JSON files)")
        for name in ("num_prompts", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")


def _load(path: str) -> dict:
    from specpilot.errors import SpecPilotError

    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SpecPilotError(f"cannot read bench record {path}: {err}") from err


def _saved(args: Args) -> dict:
    from specpilot.bench import compare_saved
    from specpilot.bench import header
    from specpilot.settings import load_setting

    record_a, record_b = _load(args.first), _load(args.second)
    body = compare_saved(record_a, record_b, seed=args.seed)
    setting = load_setting(record_b["setting"])
    head = header("compare", setting, record_b["engine"], None, record_b["fingerprint"])
    return {**head, "baseline": record_a["engine"], "recipe_hash": record_b.get("recipe_hash"),
            **body}


def _interleaved(args: Args) -> dict:
    from specpilot.bench import StoppingRule
    from specpilot.bench import compare_engines
    from specpilot.bench import header
    from specpilot.bench import replay_for
    from specpilot.bench import workload_for
    from specpilot.bench.progress import progress_bar
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    from specpilot.settings import load_setting

    setting = load_setting(args.first)
    rule = StoppingRule(args.target_half_width, args.time_budget_s, args.min_rounds,
                        args.max_rounds)
    recipes = {"a": recipe_for(setting, args.a), "b": recipe_for(setting, args.b)}
    speculative = any(r.speculative for r in recipes.values())
    models = load_models(setting, with_drafter=speculative)
    engines = {side: models.engine(recipe) for side, recipe in recipes.items()}
    workload = workload_for(setting, models.tokenizer, args.dataset, args.num_prompts,
                            args.max_new_tokens, args.ignore_eos)
    replay = None
    if setting.scenario.acceptance_profile and speculative:
        with progress_bar("AR reference for replay", len(workload.prompts)) as advance:
            replay = replay_for(models, workload, progress=advance)
    total = rule.max_rounds * len(workload.prompts)
    with progress_bar(f"A={args.a} / B={args.b}", total) as advance:
        body = compare_engines(engines["a"], engines["b"], workload, rule, replay, args.seed,
                               args.warmup, advance)
    sides = {side: {"engine": getattr(args, side), "recipe": recipes[side].to_dict(),
                    "recipe_hash": recipes[side].hash()} for side in ("a", "b")}
    return {**header("compare", setting, args.b, recipes["b"]), "baseline": args.a, **sides,
            **body}


def run(args: Args) -> int:
    from specpilot.bench import publish

    record = _saved(args) if args.second is not None else _interleaved(args)
    record = publish(record, args.results_dir, args.json)
    lo, hi = record["ci95"]
    how = (f"{record['num_rounds']} rounds, interleaved" if record["stop_reason"] != "saved_runs"
           else "saved runs, not interleaved")
    print(f"compare speed {record['setting']}: A={record['a']['engine']} "
          f"B={record['b']['engine']} [{record['acceptance']}], {len(record['ratios'])} pairs "
          f"({how}), stopped by {record['stop_reason']}")
    print(f"  median speedup {record['median_speedup']:.3f} (A time / B time; > 1: B is faster), "
          f"95% CI [{lo:.3f}, {hi:.3f}], half-width {record['half_width']:.3f}")
    if record.get("same_device") is False:
        print("  warning: the two runs were measured on different devices or software")
    print(f"  stored: {record['store_path']}")
    for plot in record["plots"]:
        print(f"  plot: {plot}")
    return 0
