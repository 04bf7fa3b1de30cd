"""H200: AR decode with W12 target weights (target linears + lm_head) vs bf16, side by side.

Interleaved per prompt (AB/BA), same prompts, CUDA graphs on both; bootstrap CI of the median
per-prompt ratio bf16 ms/token / W12 ms/token (> 1: W12 faster). Writes $OUT/h200_w12_ar.json.

Run from the repo root: PYTHONPATH=$PWD python3 experiments/h200_w12_ar.py
"""

import json
import os
import time
from pathlib import Path

from specpilot import fingerprint
from specpilot.bench.runner import run_prompt
from specpilot.bench.runner import warm_up
from specpilot.bench.stats import estimate_speedup
from specpilot.bench.workload import workload_for
from specpilot.build import load_models
from specpilot.recipe import AR
from specpilot.settings import load_setting

OUT = Path(os.environ.get("OUT", "/tmp/out"))
SETTING = "h200_c1_qwen38-27b_dflash2"


def main() -> None:
    setting = load_setting(SETTING)
    t0 = time.time()
    models = load_models(setting, with_drafter=False)
    result = {"fingerprint": fingerprint.current("cuda").to_dict(), "setting": SETTING,
              "load_s": time.time() - t0}
    engines = {"bf16": models.engine(AR)}
    t0 = time.time()
    engines["w12"] = models.engine(AR.replace(name="ar_w12", w12=("target", "lm_head")))
    result["pack_s"], result["w12_bytes"] = time.time() - t0, models.w12_nbytes()
    workload = workload_for(setting, models.tokenizer, num_prompts=6, max_new_tokens=96)
    result["warmup_s"] = {k: warm_up(e, workload) for k, e in engines.items()}
    pairs = []
    for rnd in range(3):
        for i in range(len(workload.prompts)):
            order = ("bf16", "w12") if (rnd + i) % 2 == 0 else ("w12", "bf16")
            ms = {k: run_prompt(engines[k], workload, i)["ms_per_token"] for k in order}
            pairs.append({"round": rnd, "prompt": i, **ms, "ratio": ms["bf16"] / ms["w12"]})
    estimate = estimate_speedup([p["ratio"] for p in pairs])
    result.update({"pairs": pairs, "median_speedup_w12_over_bf16": estimate.median_speedup,
                   "ci95": list(estimate.ci95)})
    print(json.dumps({k: v for k, v in result.items() if k != "pairs"}, indent=1), flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "h200_w12_ar.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
