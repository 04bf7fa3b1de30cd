"""H200: W12 target weights vs bf16 end to end, after tuning both GEMMs at the engine's shapes.

0. ``--seed RESULTS.json,...``: first store in the tuned-config cache the winners of committed
   kernels_h200 tables measured on this environment (e.g.
   results/h200-2026-12-02-kernels-frag.json, a whole sweep at M = 1-16), so a short tune below
   replaces only what it beats (kernels/tuning/seed.py).
1. ``--tune`` (default on): for every distinct Linear shape of the target (its merged projections
   and the lm_head), the ``experiments/kernels_h200.py`` sweep at ``--ms`` (cuBLAS, the bf16 Triton
   GEMM's and the W12 GEMM's SWEEP configs, each checked against the fp64 result before it is
   timed, rotating weight copies, CUDA-graph replays). The best config per (op, shape, M bucket)
   is stored in the tuned-config cache for this exact environment, so the engines below launch
   tuned kernels. Rows and their table go to ``$OUT/h200_w12_kernels.json``.
2. AR decode, one request: ``bf16`` (the AR recipe: cuBLAS), ``bf16-triton`` (tuned bf16 Triton
   GEMM) and ``w12`` (target Linears + lm_head on W12), interleaved per prompt in a rotating
   order, same prompts, CUDA graphs on all. Per engine pair, the bootstrap CI of the median
   per-prompt ratio of ms/token (> 1: the second is faster).
   ``--pdl-ab`` adds ``bf16-nopdl`` and ``w12-nopdl``: the same engines with their CUDA graphs
   captured without programmatic dependent launch (:mod:`specpilot.kernels.common.pdl`).
3. ``--spec``: the same for stock DFlash2 with replayed acceptance, ``stock`` vs
   ``stock+w12-target`` and ``stock+w12-target-frag`` (the target's W12 planes in fragment
   order, kernels/w12f_gemm) (the verify forward runs the W12 GEMM at M = block size).
   ``--profile``: then each spec engine's GPU kernels per decode step over two prompts
   (torch.profiler, the grouping of ``h200_profile_step.py``), to say where the engines differ.
   Read it with care: a kernel launched with PDL starts while its predecessor runs, so its
   duration includes that wait and the kernels' times overlap (after a W12 GEMM, add + RMSNorm
   showed 38 us per call against 2.4 after cuBLAS, results/h200-2026-12-02-w12-ar-run28-profile
   .json); the decode's ms/token is the number to compare.

Writes ``$OUT/h200_w12_ar.json``; each stage prints a progress line to stderr. ``--watchdog-s S``
prints every thread's Python stack and exits after S seconds, so a run cut by the device call's
limit still says where it was (one run at 55c1176 was cut silently at 480 s). Run from the repo
root: ``python3 experiments/h200_w12_ar.py [--seed RESULTS.json] [--ms 1,8,16] [--no-tune] [--wide]
[--rounds 3] [--spec] [--profile] [--pdl-ab] [--l2 2,8,64] [--watchdog-s 540]``
"""

import argparse
import faulthandler
import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
OUT = Path(os.environ.get("OUT", "/tmp/out"))
SETTING = "h200_c1_qwen38-27b_dflash2"
GEMM_OPS = ("skinny_gemm", "w12_gemm", "w12f_gemm")


def engine_shapes(model) -> dict[str, tuple[int, int]]:
    """``name: (K, N)`` of each distinct Linear weight shape of ``model``."""
    from specpilot.engines.models.layers import Linear

    shapes = {}
    for name, module in model.named_modules():
        if isinstance(module, Linear):
            n, k = module.weight.shape
            shapes.setdefault((k, n), name)
    return {name.replace(".", "_"): kn for kn, name in shapes.items()}


# ``--wide``: more W12 configs around the first H200 sweep's winners (GEMV 8 x 256, mma.sync with
# 2 warps at 32 x 128): smaller K steps and rows per program, 2-4 stages, split-K up to 4.
WIDE_W12 = [
    ("gemv", 8, 512, 1, 4, 3), ("gemv", 8, 256, 1, 2, 3), ("gemv", 4, 512, 1, 2, 3),
    ("gemv", 8, 256, 2, 4, 3), ("gemv", 8, 128, 1, 2, 4), ("gemv", 16, 256, 1, 8, 3),
    ("dot", 32, 64, 1, 2, 3), ("dot", 32, 64, 1, 2, 4), ("dot", 32, 64, 2, 2, 3),
    ("dot", 32, 128, 1, 2, 2), ("dot", 32, 128, 1, 2, 4), ("dot", 64, 64, 1, 2, 3),
    ("dot", 64, 64, 1, 2, 4), ("dot", 64, 128, 1, 2, 2), ("dot", 32, 64, 4, 2, 3),
    ("dot", 64, 64, 2, 2, 3),
]


def tune(model, ms: list[int], budget_s: float, wide: bool) -> dict:
    """The kernels_h200 sweep at the model's shapes; seeds the tuned cache with the winners."""
    import torch

    from specpilot.kernels.w12_gemm import space as w12_space

    if wide:
        names = ("kernel", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
        w12_space.SWEEP.extend({**dict(zip(names, c)), "DECODE": "prmt", "ESC_CHUNK": 1,
                                **w12_space.ADDED_DEFAULTS.get(c[0], {})}
                              for c in WIDE_W12)

    sys.path.insert(0, str(ROOT))
    import kernels_h200 as kb
    from specpilot.fingerprint import current
    from specpilot.kernels.common.roofline import CEILINGS
    from specpilot.kernels.common.roofline import ceiling_for
    from specpilot.kernels.tuning.seed import seed_from_results

    fp = current("cuda")
    ceiling = ceiling_for(fp.gpu) or CEILINGS["NVIDIA H200"]
    state = {"start": time.time(), "budget_s": budget_s, "over_budget": False, "best": {},
             "broken": {}}
    report = {"fingerprint": fp.to_dict(), "kernel_key": fp.kernel_key(), "ceiling": vars(ceiling),
              "shapes": engine_shapes(model), "checks": kb.run_checks(), "rows": []}
    for name, (k, n) in report["shapes"].items():
        state["best"] = {}
        report["rows"].extend(kb.bench_shape(name, k, n, ms, ceiling, state))
        torch.cuda.empty_cache()
    report["elapsed_s"] = time.time() - state["start"]
    report["table"] = kb.table(report["rows"])
    print(report["table"], flush=True)
    path = OUT / "h200_w12_kernels.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    report["seeded"] = seed_from_results(path, ops=GEMM_OPS)
    return {k: report[k] for k in ("shapes", "elapsed_s", "seeded")}


def progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def profile(engine, workload, replay, prompts: int = 2, top: int = 30) -> dict:
    """GPU kernels of ``engine``'s decode of the first ``prompts`` prompts, per decode step."""
    import torch

    sys.path.insert(0, str(ROOT))
    from h200_profile_step import _kernels

    from specpilot.bench.runner import run_prompt

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        steps = sum(len(run_prompt(engine, workload, i, replay=replay)["accept_lengths"])
                    for i in range(prompts))
        torch.cuda.synchronize()
    rows = _kernels(prof, steps)
    for r in rows[:top]:
        print(f"{r['us_per_step']:9.1f} us {r['calls_per_step']:6.1f}x  {r['kernel'][:110]}",
              flush=True)
    return {"steps": steps, "gpu_us_per_step": sum(r["us_per_step"] for r in rows),
            "kernels": rows[:top]}


def interleave(engines: dict, workload, rounds: int, replay=None) -> dict:
    """Every prompt on every engine, in a rotating order; ratios of each pair of engines."""
    from specpilot.bench.runner import run_prompt
    from specpilot.bench.stats import estimate_speedup

    names = list(engines)
    runs = []
    for rnd in range(rounds):
        for i in range(len(workload.prompts)):
            shift = (rnd + i) % len(names)
            order = names[shift:] + names[:shift]
            ms = {k: run_prompt(engines[k], workload, i, replay=replay)["ms_per_token"]
                  for k in order}
            runs.append({"round": rnd, "prompt": i, **ms})
        progress(f"round {rnd + 1}/{rounds} done")
    pairs = {}
    for a, b in itertools.combinations(names, 2):
        est = estimate_speedup([r[a] / r[b] for r in runs])
        pairs[f"{b}_over_{a}"] = {"median_speedup": est.median_speedup, "ci95": list(est.ci95)}
    medians = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in names}
    return {"runs": runs, "median_ms_per_token": medians, "speedups": pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="1,8,16", help="M values the GEMM sweep tunes (1: AR "
                        "decode; 8: the DFlash2 verify of the --spec run; 16: the issue's M)")
    parser.add_argument("--budget-s", type=float, default=150.0, help="GEMM sweep budget")
    parser.add_argument("--no-tune", action="store_true", help="use the cache as it is")
    parser.add_argument("--seed", default="", help="comma-separated kernels_h200 JSONs to seed "
                        "the tuned-config cache from first")
    parser.add_argument("--wide", action="store_true", help="sweep WIDE_W12 too")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spec", action="store_true", help="also stock vs stock+w12-target")
    parser.add_argument("--profile", action="store_true",
                        help="with --spec: each spec engine's kernels per decode step")
    parser.add_argument("--pdl-ab", action="store_true", help="also bf16 and w12 engines whose "
                        "graphs were captured without programmatic dependent launch")
    parser.add_argument("--l2", default="", help="L2_PREFETCH values whose variants of the "
                        "l2_sweep.BASES configs join both GEMMs' sweeps (e.g. 2,8,64)")
    parser.add_argument("--note", default="")
    parser.add_argument("--watchdog-s", type=float, default=0.0,
                        help="dump every thread's stack and exit after this many seconds (0: off)")
    args = parser.parse_args()
    if args.watchdog_s > 0:
        faulthandler.dump_traceback_later(args.watchdog_s, exit=True)

    from specpilot import fingerprint
    from specpilot.bench.runner import warm_up
    from specpilot.bench.workload import replay_for
    from specpilot.bench.workload import workload_for
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    from specpilot.recipe import AR
    from specpilot.settings import load_setting

    OUT.mkdir(parents=True, exist_ok=True)
    setting = load_setting(SETTING)
    t0 = time.time()
    models = load_models(setting, with_drafter=args.spec)
    progress("models loaded")
    result = {"fingerprint": fingerprint.current("cuda").to_dict(), "setting": SETTING,
              "note": args.note, "load_s": time.time() - t0}
    if args.l2:
        sys.path.insert(0, str(ROOT))
        from l2_sweep import extend_sweeps

        result["l2_variants"] = extend_sweeps([int(v) for v in args.l2.split(",")])
    if args.seed:
        from specpilot.kernels.tuning.seed import seed_from_results

        result["seeded"] = {path: seed_from_results(path, ops=GEMM_OPS)
                            for path in args.seed.split(",")}
    if not args.no_tune:
        result["tune"] = tune(models.target, [int(m) for m in args.ms.split(",")], args.budget_s,
                              args.wide)
    engines = {"bf16": models.engine(AR),
               "bf16-triton": models.engine(AR.replace(name="ar_triton", gemm="triton"))}
    t0 = time.time()
    engines["w12"] = models.engine(AR.replace(name="ar_w12", w12=("target", "lm_head")))
    result["pack_s"], result["w12_bytes"] = time.time() - t0, models.w12_nbytes()
    workload = workload_for(setting, models.tokenizer, num_prompts=6, max_new_tokens=96)
    progress("engines built")
    result["warmup_s"] = {}
    for name, engine in engines.items():
        result["warmup_s"][name] = warm_up(engine, workload)
        progress(f"{name} warmed up")
    if args.pdl_ab:  # their graphs are captured (in the warm-up) with PDL off, and keep it
        from specpilot.kernels.common.pdl import pdl_disabled

        for name, recipe in (("bf16-nopdl", AR.replace(name="ar_nopdl")),
                             ("w12-nopdl", AR.replace(name="ar_w12_nopdl",
                                                      w12=("target", "lm_head")))):
            engines[name] = models.engine(recipe)
            with pdl_disabled():
                result["warmup_s"][name] = warm_up(engines[name], workload)
            progress(f"{name} warmed up")
    result["ar"] = interleave(engines, workload, args.rounds)
    print(json.dumps({k: result["ar"][k] for k in ("median_ms_per_token", "speedups")}, indent=1),
          flush=True)
    (OUT / "h200_w12_ar.json").write_text(json.dumps(result, indent=1, default=str))
    if args.spec:
        del engines
        replay = replay_for(models, workload)
        spec = {name: models.engine(recipe_for(setting, name))
                for name in ("stock", "stock+w12-target", "stock+w12-target-frag")}
        result["spec_warmup_s"] = {k: warm_up(e, workload, replay) for k, e in spec.items()}
        result["spec"] = interleave(spec, workload, args.rounds, replay=replay)
        result["spec"]["acceptance"] = setting.scenario.acceptance_profile
        print(json.dumps({k: result["spec"][k] for k in ("median_ms_per_token", "speedups")},
                         indent=1), flush=True)
        if args.profile:
            result["spec_profile"] = {name: profile(engine, workload, replay)
                                      for name, engine in spec.items()}
    (OUT / "h200_w12_ar.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
