"""H200: the campaign's kernel sub-agent on a W12 champion, without Ray.

The steps of ``Campaign.kernel_step`` (search/driver.py) with the worker's job functions run in
this process (``workers.evaluate.run_job``; each kernel config still in its own trial process):

1. survey every target weight of the setting at the verify row count on the op the champion runs
   it on (``kernel_agent.target_gemms``: a W12 recipe's packed weights on its W12 GEMM), with the
   config the engine would launch (tuned cache, else the space default), each placed on the
   roofline of the setting's GPU;
2. the weight farthest from the read ceiling gets an Optuna study (warm start: the surveyed config
   and the sweep), ``--trials`` configs a round for ``--rounds`` rounds: ask (valid, new configs
   only), check and time in the worker's kernel job, tell, best entry.

Records the survey, the chosen weight and per round the counts and the best entry, in
``$OUT/h200_kernel_agent.json``. Run from the repository root (Optuna installed)::

    python3 experiments/h200_kernel_agent.py [--setting h200_c1_qwen38-27b_dflash2]
        [--recipe-w12 target,lm_head] [--order frag] [--trials 24] [--rounds 2]

``--cpu-smoke`` runs the tiny setting through the Triton interpreter (no timing value).
"""

import argparse
import json
import os
import sys
from pathlib import Path

CPU_SMOKE = "--cpu-smoke" in sys.argv
if CPU_SMOKE:  # must precede the first triton import
    os.environ["TRITON_INTERPRET"] = "1"

from specpilot.costmodel import GPUS  # noqa: E402
from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels.tuning.ops import space_of  # noqa: E402
from specpilot.recipe import Recipe  # noqa: E402
from specpilot.search import kernel_agent as ka  # noqa: E402
from specpilot.search.catalog import model_configs  # noqa: E402
from specpilot.search.catalog import setting_features  # noqa: E402
from specpilot.settings import load_setting  # noqa: E402
from specpilot.workers.evaluate import run_job  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
DEVICE = "cpu" if CPU_SMOKE else "cuda"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", default="cpu_c1_tiny" if CPU_SMOKE else
                        "h200_c1_qwen38-27b_dflash2")
    parser.add_argument("--recipe-w12", default="target,lm_head",
                        help="weight groups the champion packs as W12 ('' for a bf16 champion)")
    parser.add_argument("--order", default="frag", choices=("rows", "frag"))
    parser.add_argument("--m", type=int, default=None, help="rows (default: the block size)")
    parser.add_argument("--trials", type=int, default=3 if CPU_SMOKE else 24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=2 if CPU_SMOKE else 15)
    parser.add_argument("--config-timeout-s", type=float, default=30.0 if CPU_SMOKE else 60.0)
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    setting = load_setting(args.setting)
    target_config, _ = model_configs(setting)
    groups = tuple(g for g in args.recipe_w12.split(",") if g)
    champion = Recipe(name="champion", w12=groups, w12_order=args.order if groups else "rows")
    m = args.m or setting_features(setting).get("block_size") or 1  # the verify rows
    gpu = GPUS.get(setting.gpu)
    fp = current(DEVICE)
    report = {"fingerprint": fp.to_dict(), "note": args.note, "setting": args.setting,
              "recipe": {"w12": list(groups), "w12_order": champion.w12_order}, "m": m,
              "read_tb_s": gpu.read_tb_s}

    def save():
        (OUT / "h200_kernel_agent.json").write_text(json.dumps(report, indent=1))

    gemms = ka.target_gemms(target_config, champion)
    survey = run_job({"kind": "kernel_survey", "device": DEVICE, "m": m, "reps": args.reps,
                      "gemms": gemms})
    if survey.get("state") != "ok":
        raise SystemExit(f"survey failed: {survey.get('error')}")
    rows = [ka.farthest([row], gpu.read_tb_s) for row in survey["rows"]]
    report["survey"] = rows
    worst = ka.farthest(survey["rows"], gpu.read_tb_s)
    report["worst"] = worst
    save()
    for row in rows:
        print(f"{row['op']:>12} {row['n']:>6}x{row['k']:<6} {row['p50_us']:8.1f} us "
              f"{row['fraction_of_ceiling']:.2f} of the ceiling", flush=True)
    op, n, k = worst["op"], worst["n"], worst["k"]
    space = space_of(op)
    kernel_key = fp.kernel_key()
    study = ka.open_study(str(OUT / "optuna.journal"), ka.study_name(
        args.setting, op, n, k, space.m_bucket(m), kernel_key), seed=0)
    report["warm_start"] = ka.warm_start(study, space, m, n, k, [worst["config"], *space.SWEEP])
    report["rounds"] = []
    for rnd in range(args.rounds):
        asked = ka.ask_configs(study, space, m, n, k, args.trials, seed=rnd)
        result = run_job({"kind": "kernel", "device": DEVICE, "op": op, "m": m, "n": n, "k": k,
                          "reps": args.reps, "configs": [c for _, c in asked],
                          "config_timeout_s": args.config_timeout_s})
        if result.get("state") != "ok":
            raise SystemExit(f"kernel job failed: {result.get('error')}")
        counts = ka.tell_results(study, asked, result["results"])
        entry = ka.best_entry(study, op, n, k, m, space.m_bucket(m), fp.to_dict(), kernel_key,
                              worst["traffic_bytes"], gpu.read_tb_s)
        report["rounds"].append({"asked": len(asked), "counts": counts, "best": entry})
        save()
        print(f"round {rnd}: {counts} best {entry and entry['p50_us']:.1f} us "
              f"({entry and entry['fraction_of_ceiling']:.2f} of the ceiling)", flush=True)


if __name__ == "__main__":
    main()
