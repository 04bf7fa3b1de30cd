"""Seed-scale throughput tables: engine B vs engine A under continuous batching, side by side.

For each setting (random weights at full size, acceptance replayed from the setting's profile or
``--acceptance``) and each concurrency level, ``specpilot.bench.batched.compare_levels`` runs the
same prompts through the continuous-batching scheduler (closed loop) with A and B interleaved
(A/B, B/A, ..): one throughput ratio per repetition, the median with a bootstrap 95% CI, and each
side's p99 request latency. On CUDA the batched engine replays CUDA graphs per batch bucket. Each
setting's record (``kind: batched_compare``, with the cost model's speedup bound for that many
requests decoded together at the level's tau) goes to $OUT/batched-<setting>.json; ``specpilot
report`` renders it.

    python3 experiments/h200_batched.py [--settings S1,S2] [--levels 1,16,32] [--b stock]
        (engine names: ar, stock, a setting recipe, any of them +MECHANISM from the search
        catalog, e.g. --a ar+batched-prefill --b stock+batched-prefill+gdn-fused-snapshot)
        [--pairs A:B,A:B ..] (several pairs on one model load, instead of --a/--b; the record of
        pair k > 0 is $OUT/batched-<setting>-<k>.json)
        [--acceptance profile:proxy-h200-dflash2#gsm8k] [--repeats 3] [--max-new-tokens 64]
        [--sps-table ENGINE:NAME,..] (first, on the same model load: measure ENGINE's confidence
        budget steps/s table at the largest level, as ``specpilot sps-table``, and write recipe
        NAME, which the pairs may then name; the measurement goes to $OUT/sps-<setting>-NAME.json)
"""

import argparse
import json
import os
import time
from pathlib import Path

OUT = Path(os.environ.get("OUT", "/tmp/out"))
PROMPTS_BY_LEVEL = {1: 6, 4: 16, 16: 32, 32: 64}


def bound(setting, models, tau: float | None, concurrency: int = 1) -> float | None:
    """The cost model's speedup bound at ``tau`` for ``concurrency`` requests decoded together
    (None on CPU or without tau)."""
    from specpilot.costmodel import GPUS
    from specpilot.costmodel import engine_costs
    from specpilot.costmodel import speedup_bound
    from specpilot.search.catalog import model_configs

    gpu = GPUS.get(setting.gpu)
    if gpu is None or tau is None or models.drafter is None or setting.gpu == "cpu":
        return None
    target, drafter = model_configs(setting)
    return speedup_bound(engine_costs(target, drafter, gpu, models.drafter.block_size,
                                      num_requests=concurrency), tau)


def run_setting(name: str, args) -> list[dict]:
    from specpilot import fingerprint
    from specpilot.bench.batched import compare_levels
    from specpilot.bench.sps import save_budget_recipe
    from specpilot.bench.workload import replay_for
    from specpilot.bench.workload import workload_for
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    from specpilot.settings import load_setting

    setting = load_setting(name)
    started = time.time()
    models = load_models(setting)
    levels = [int(x) for x in args.levels.split(",")]
    workload = workload_for(setting, models.tokenizer,
                            num_prompts=max(PROMPTS_BY_LEVEL.get(c, 2 * c) for c in levels),
                            max_new_tokens=args.max_new_tokens)
    replay = replay_for(models, workload, spec=args.acceptance)
    setup_s, records = time.time() - started, []
    for engine, recipe_name in args.sps_tables:
        _, record = save_budget_recipe(models, recipe_for(setting, engine), engine, max(levels),
                                       recipe_name, log=lambda m, e=engine: print(f"{e} sps {m}",
                                                                                  flush=True))
        (OUT / f"sps-{setting.name}-{recipe_name}.json").write_text(json.dumps(record, indent=1))
    for k, (a, b) in enumerate(args.pairs):
        pair_started = time.time()
        engines = {"a": models.engine(recipe_for(setting, a)),
                   "b": models.engine(recipe_for(setting, b))}
        out = {"kind": "batched_compare", "timestamp": pair_started, "setting": name, "a": a,
               "b": b, "acceptance": replay.label if replay is not None else "measured",
               "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
               "setup_s": setup_s}
        out["fingerprint"] = fingerprint.current(setting.engine.device).to_dict()
        out["levels"] = []
        path = OUT / (f"batched-{name}.json" if k == 0 else f"batched-{name}-{k}.json")
        for concurrency in levels:  # the record is rewritten after each level: a cut call
            level, = compare_levels(engines, workload, [concurrency], args.repeats, replay,
                                    PROMPTS_BY_LEVEL,  # keeps the levels it finished
                                    log=lambda m, a=a, b=b: print(f"{name} {a} vs {b} {m}",
                                                                  flush=True))
            if level.get("b_tau") is not None:  # the bound at this level's rows and measured tau
                level["speedup_bound"] = bound(setting, models, level["b_tau"], concurrency)
            out["levels"].append(level)
            out["elapsed_s"] = time.time() - pair_started
            path.write_text(json.dumps(out, indent=1))
        records.append(out)
        del engines
    return records


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="h200_c1_qwen38-27b_dflash2")
    parser.add_argument("--levels", default="1,16,32")
    parser.add_argument("--a", default="ar")
    parser.add_argument("--b", default="stock")
    parser.add_argument("--pairs", default=None,
                        help="A:B,A:B,..: several engine pairs on one model load (overrides --a/--b)")
    parser.add_argument("--acceptance", default=None,
                        help="replayed acceptance spec (default: the setting's profile)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--sps-table", default=None,
                        help="ENGINE:NAME,..: measure ENGINE's budget table, write recipe NAME")
    args = parser.parse_args(argv)
    args.sps_tables = [tuple(p.split(":")) for p in args.sps_table.split(",")] \
        if args.sps_table else []
    if any(len(p) != 2 for p in args.sps_tables):
        parser.error(f"--sps-table must be ENGINE:NAME,..; got {args.sps_table!r}")
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")] if args.pairs else [(args.a,
                                                                                       args.b)]
    if any(len(pair) != 2 for pair in pairs):
        parser.error(f"--pairs must be A:B,A:B,..; got {args.pairs!r}")
    args.pairs = pairs
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.settings.split(","):
        run_setting(name, args)


if __name__ == "__main__":
    main()
