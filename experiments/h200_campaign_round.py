"""One campaign round without Ray (the GPU box has none): writes $OUT/campaign_round.json.

The same steps as ``specpilot.search``'s driver, with the worker's evaluation entrypoint
(``specpilot.workers.evaluate.run_job``) called in this process, so the seed-scale weights load
once: measure the champion (stock) and the AR step of the same build -> gap table with floors and
the calibrated prediction -> the catalog and mutation agents' proposals for this setting -> each
candidate built, token-forced and A/B'd against the champion -> winners. Reports the gap table's
prediction error per phase (the acceptance check asks for |predicted - measured| <= 20%).

Run from the repo root: PYTHONPATH=$PWD python3 experiments/h200_campaign_round.py [SETTING]
(a CPU setting such as cpu_c1_tiny runs the same code as a smoke test).
"""

import json
import os
import sys
import time
from pathlib import Path

from specpilot.recipe import STOCK
from specpilot.search.agents import AgentContext
from specpilot.search.agents import CatalogAgent
from specpilot.search.agents import MutationAgent
from specpilot.search.catalog import setting_features
from specpilot.search.config import CampaignConfig
from specpilot.search.gaps import gap_rows
from specpilot.settings import load_setting
from specpilot.workers.evaluate import run_job

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name = args[0] if args else "h200_c1_qwen38-27b_dflash2"
    gpu = not name.startswith("cpu")
    setting = load_setting(name)
    features = setting_features(setting)
    budget = {"num_prompts": 4 if gpu else 2, "max_new_tokens": 96 if gpu else 16,
              "half_width": 0.03, "budget_s": 60.0 if gpu else 6.0, "max_rounds": 8}
    validation = {"num_prompts": 4 if gpu else 2, "max_new_tokens": 48 if gpu else 16}
    base = {"setting": name, "seed": 0, "device": setting.engine.device, "bench": budget,
            "validation": validation}
    out = {"setting": name, "features": features, "budget": budget, "validation": validation}
    start = time.time()
    measured = run_job({**base, "kind": "measure", "recipe": STOCK.to_dict()})
    out["measure"] = {k: v for k, v in measured.items() if k != "traceback"}
    out["fingerprint"] = measured.get("fingerprint")
    rows = gap_rows(setting, features, measured, STOCK)
    out["gap_table"] = rows
    out["prediction_within_20pct"] = {r["phase"]: abs(r["prediction_error"]) <= 0.20
                                      for r in rows if r.get("prediction_error") is not None}
    print(json.dumps(rows, indent=1), flush=True)
    if "--measure-only" in sys.argv:  # the gap table and its prediction error, no candidates
        out["wall_s"] = time.time() - start
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "campaign_round.json").write_text(json.dumps(out, indent=1, default=str))
        return
    config = CampaignConfig(setting=name, canary=True)
    context = AgentContext(name, features, STOCK, rows, frozenset(), {}, 1, 0, 2)
    proposals = CatalogAgent(config).propose(context) + MutationAgent(config).propose(context)
    out["proposals"] = [p.mechanism for p in proposals]
    out["candidates"] = []
    for p in proposals:
        result = run_job({**base, "kind": "candidate", "recipe": p.recipe(STOCK).to_dict(),
                          "champion": STOCK.to_dict(), "fault": p.fault, "name": p.mechanism})
        compare = result.get("compare") or {}
        entry = {"mechanism": p.mechanism, "delta": p.delta, "fault": p.fault,
                 "state": result["state"], "error": result.get("error"),
                 "validation": {k: (result.get("validation") or {}).get(k) for k in
                                ("passed", "num_tokens", "num_mismatches", "max_mismatch_gap",
                                 "failures")},
                 "speedup_vs_stock": compare.get("median_speedup"), "ci95": compare.get("ci95"),
                 "tau": compare.get("tau"), "phases_ms": result.get("phases_ms")}
        out["candidates"].append(entry)
        print(json.dumps(entry), flush=True)
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / "campaign_round.json").write_text(json.dumps(out, indent=1, default=str))
    out["wall_s"] = time.time() - start
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "campaign_round.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
