"""H200 batched throughput: stock DFlash2 vs AR under continuous batching; writes $OUT/h200_batched.json.

Setting ``h200_c1_qwen38-27b_dflash2`` (random bf16 weights at full size, acceptance replayed from
the setting's profile). For each concurrency level the two engines run the same prompts through the
continuous-batching scheduler (closed loop, ``concurrency`` clients), interleaved A/B/B/A over
``REPEATS`` repetitions; each repetition gives one throughput ratio. Both sides run eagerly (the
batched engine has no CUDA graphs yet), so the ratio compares like with like.

Run from the repo root: PYTHONPATH=$PWD python3 experiments/h200_batched.py [LEVELS]
"""

import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from specpilot import fingerprint
from specpilot.bench.batched import bench_level
from specpilot.bench.stats import estimate_speedup
from specpilot.bench.stats import percentile
from specpilot.bench.workload import replay_for
from specpilot.bench.workload import workload_for
from specpilot.build import load_models
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.settings import load_setting

OUT = Path(os.environ.get("OUT", "/tmp/out"))
SETTING = "h200_c1_qwen38-27b_dflash2"
PROMPTS_BY_LEVEL = {1: 6, 4: 16, 16: 32, 32: 32}
MAX_NEW_TOKENS = 64
REPEATS = 3


def _level_summary(level: dict) -> dict:
    e2e = [p["e2e_s"] for p in level["per_prompt"]]
    return {"output_tok_s": level["output_tok_s"], "wall_s": level["wall_s"],
            "tau": level["tau"], "num_tokens": level["num_tokens"],
            "p50_latency_s": percentile(e2e, 50), "p99_latency_s": percentile(e2e, 99),
            "itl_ms_median": level["itl_ms"]["median"] if level["itl_ms"] else None}


def main() -> None:
    levels = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else list(PROMPTS_BY_LEVEL)
    result = {"fingerprint": fingerprint.current("cuda").to_dict(), "setting": SETTING,
              "max_new_tokens": MAX_NEW_TOKENS, "repeats": REPEATS, "levels": []}
    setting = load_setting(SETTING)
    t0 = time.time()
    models = load_models(setting)
    workload = workload_for(setting, models.tokenizer, num_prompts=max(PROMPTS_BY_LEVEL.values()),
                            max_new_tokens=MAX_NEW_TOKENS)
    replay = replay_for(models, workload)
    result["acceptance"], result["setup_s"] = replay.label, time.time() - t0
    engines = {"ar": models.engine(AR), "stock": models.engine(STOCK)}
    for concurrency in levels:
        n = PROMPTS_BY_LEVEL.get(concurrency, 2 * concurrency)
        sub = dataclasses.replace(workload, prompts=workload.prompts[:n], texts=workload.texts[:n])
        runs = {"ar": [], "stock": []}
        for rep in range(REPEATS):
            order = ("ar", "stock") if rep % 2 == 0 else ("stock", "ar")
            for name in order:
                level = bench_level(engines[name], sub, concurrency, warmup=(rep == 0),
                                    replay=replay)
                runs[name].append(_level_summary(level))
            torch.cuda.synchronize()
        ratios = [s["output_tok_s"] / a["output_tok_s"] for a, s in zip(runs["ar"], runs["stock"])]
        estimate = estimate_speedup(ratios, seed=0)
        entry = {"concurrency": concurrency, "num_prompts": n, "runs": runs,
                 "throughput_ratios_stock_over_ar": ratios,
                 "median_ratio": statistics.median(ratios), "ci95": list(estimate.ci95),
                 "p99_latency_s": {k: statistics.median(r["p99_latency_s"] for r in v)
                                   for k, v in runs.items()},
                 "tau_stock": statistics.median(r["tau"] for r in runs["stock"])}
        result["levels"].append(entry)
        print(f"c={concurrency}: stock/ar throughput {entry['median_ratio']:.2f}x "
              f"{[round(r, 2) for r in ratios]} ar {runs['ar'][0]['output_tok_s']:.0f} tok/s "
              f"stock {runs['stock'][0]['output_tok_s']:.0f} tok/s p99 {entry['p99_latency_s']}",
              flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "h200_batched.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
