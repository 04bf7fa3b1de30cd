"""H200 run for the Muse issue: writes $OUT/h200_muse.json.

For h200_c1_muse-glimmer-30b_{dflash2,dspark} (random bf16 weights at full size, acceptance replayed
from each setting's profile): AR ms/token at batch 1 (CUDA graphs; cuBLAS and tuned Triton GEMM),
stock ms/token interleaved with AR per prompt (paired ratios, bootstrap CI), and the stock step split
into draft / verify / commit from CUDA events around the captured graphs. One setting at a time (two
55.7 GB targets do not fit together).

Run from the repo root: PYTHONPATH=$PWD python3 experiments/h200_muse.py
"""

import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from h200_engine_core import OUT  # noqa: E402
from h200_engine_core import _bootstrap_ci  # noqa: E402
from h200_engine_core import _events_ms  # noqa: E402

from specpilot import fingerprint  # noqa: E402
from specpilot.build import load_models  # noqa: E402
from specpilot.datasets import load_prompts  # noqa: E402
from specpilot.engines.drafters.replay import AcceptanceProfile  # noqa: E402
from specpilot.engines.drafters.replay import ReplayPlan  # noqa: E402
from specpilot.engines.engine import SamplingParams  # noqa: E402
from specpilot.kernels.tuning.seed import seed_from_results  # noqa: E402
from specpilot.recipe import AR  # noqa: E402
from specpilot.recipe import STOCK  # noqa: E402
from specpilot.settings import load_setting  # noqa: E402

RESULT = {"fingerprint": fingerprint.current("cuda").to_dict()}


def measure(name: str) -> dict:
    setting = load_setting(name)
    t0 = time.time()
    models = load_models(setting)
    torch.cuda.synchronize()
    weight_bytes = sum(p.numel() * p.element_size() for p in models.target.parameters())
    res = {"load_s": time.time() - t0, "target_weight_bytes": weight_bytes,
           "weight_read_floor_ms": weight_bytes / 4.58e12 * 1e3,
           "drafter_params": sum(p.numel() for p in models.drafter.parameters())}
    engines = {"ar": models.engine(AR), "ar_triton": models.engine(AR.replace(gemm="triton")),
               "stock": models.engine(STOCK),
               "stock_triton": models.engine(STOCK.replace(gemm="triton"))}
    block = engines["stock"].block_size
    profile = AcceptanceProfile.parametric(float(setting.scenario.acceptance_profile.split(":")[1]),
                                           block)
    res["block_size"], res["profile"] = block, {"name": profile.name, "tau": profile.tau}
    base = models.tokenizer.encode(" ".join(load_prompts("gsm8k", 40))).ids
    prompts = [base[i * 37:i * 37 + 128] for i in range(3)]
    params = SamplingParams(max_new_tokens=setting.scenario.max_new_tokens, ignore_eos=True)
    short = SamplingParams(max_new_tokens=16, ignore_eos=True)
    warm = engines["ar"].generate(prompts[0], short)
    for engine in engines.values():
        plan = ReplayPlan(warm.tokens, profile, models.target.vocab_size) if engine.drafter else None
        engine.generate(prompts[0], short, replay=plan)
    ms = {n: [] for n in engines}
    taus = []
    for rep in range(2):
        for i, p in enumerate(prompts):
            ref = None
            for n, engine in engines.items():
                plan = None
                if engine.drafter is not None:
                    plan = ReplayPlan(ref, profile, models.target.vocab_size, seed=rep * 100 + i)
                out = engine.generate(p, params, replay=plan)
                ref = ref or out.tokens
                ms[n].append(out.decode_s / (len(out.tokens) - 1) * 1e3)
                if plan is not None:
                    taus.append(out.tau)
    res["ms_per_token"] = {n: {"median": statistics.median(v), "all": v} for n, v in ms.items()}
    res["replayed_tau"] = statistics.mean(taus)
    for n in ("ar_triton", "stock", "stock_triton"):
        ratios = [a / b for a, b in zip(ms["ar"], ms[n])]
        res[f"speedup_{n}_vs_ar"] = {"median": statistics.median(ratios),
                                     "ci95": _bootstrap_ci(ratios), "pairs": len(ratios)}
    graphs = engines["stock"]._persistent[2]
    res["stock_step_ms"] = {part: _events_ms(lambda g=graphs[part]: g.graph.replay())
                            for part in ("draft", "verify", "commit")}
    res["ar_step_ms"] = _events_ms(lambda: engines["ar"]._persistent[2]["decode"].graph.replay())
    res["ar_triton_step_ms"] = _events_ms(
        lambda: engines["ar_triton"]._persistent[2]["decode"].graph.replay())
    return res


if __name__ == "__main__":
    RESULT["tuned_gemm_configs_seeded"] = seed_from_results(
        Path(__file__).parent / "results" / "h200-2026-11-29-kernels.json")
    for name in ("h200_c1_muse-glimmer-30b_dflash2", "h200_c1_muse-glimmer-30b_dspark"):
        t0 = time.time()
        try:
            RESULT[name] = measure(name)
        except Exception:
            RESULT[name] = {"error": traceback.format_exc()}
            print(RESULT[name]["error"], file=sys.stderr)
        gc.collect()  # the setting's models and graphs go before the next one loads
        torch.cuda.empty_cache()
        RESULT[name + "_wall_s"] = time.time() - t0
        (OUT / "h200_muse.json").write_text(json.dumps(RESULT, indent=1))
        r = RESULT[name]
        print(name, {k: r.get(k) for k in ("weight_read_floor_ms", "replayed_tau", "stock_step_ms",
                                           "ar_step_ms", "ar_triton_step_ms")})
        for k, v in r.get("ms_per_token", {}).items():
            print("  ms/token", k, round(v["median"], 3))
        for k in [k for k in r if k.startswith("speedup_")]:
            print("  ", k, r[k])
