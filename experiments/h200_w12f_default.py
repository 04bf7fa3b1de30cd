"""H200: the fragment-order W12 GEMM's untuned default config, before and after 2026-12-04.

The engine launches ``space.default_config`` wherever the tuned cache has no entry for its
environment (a new driver, torch or triton: stale entries are never reused). Per shape and M this
times, on one case (the sweep's weights, rotating copies), four configs in interleaved rounds:
the previous default (:func:`previous_default`, the heuristic as it was), the current one, the
current one with the integer decode instead of the prmt (inline PTX) one, and the row's winner
in ``results/h200-2026-12-03-kernels-m1-16-one-start.json`` (the whole sweep on one machine
start). Each is checked against the exact result before it is timed.

Run from the repository root::

    python3 experiments/h200_w12f_default.py [--shapes q3_gdn_out,..] [--m 1,4,16] [--rounds 3]

``--cpu-smoke`` runs tiny shapes through the Triton interpreter (no timing value). Writes
``$OUT/h200_w12f_default.json`` after every shape.
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

CPU_SMOKE = "--cpu-smoke" in sys.argv
if CPU_SMOKE:  # must precede the first triton import
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels_h200 as kb  # noqa: E402  (shapes, device)

from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels.common.bench import num_copies_for  # noqa: E402
from specpilot.kernels.common.launch import cdiv  # noqa: E402
from specpilot.kernels.common.launch import next_pow2  # noqa: E402
from specpilot.kernels.common.launch import num_sms  # noqa: E402
from specpilot.kernels.tuning.ops import complete_config  # noqa: E402
from specpilot.kernels.tuning.ops import get_op  # noqa: E402
from specpilot.kernels.tuning.study import evaluate  # noqa: E402
from specpilot.kernels.w12.format import FRAG_PAIRS  # noqa: E402
from specpilot.kernels.w12.format import FRAG_ROWS  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
TABLE = Path(__file__).resolve().parent / "results/h200-2026-12-03-kernels-m1-16-one-start.json"


def previous_default(m: int, n: int, k: int, sms: int) -> dict:
    """``w12f_gemm.space.default_config`` before 2026-12-04 (the A of this A/B)."""
    blocks = cdiv(cdiv(k, 2), FRAG_PAIRS)
    block_k = FRAG_PAIRS * (2 if blocks % 2 == 0 else 1)
    warps = 2
    while warps < 8 and cdiv(cdiv(n, FRAG_ROWS), warps) > 65535:
        warps *= 2
    tiles, steps, split = cdiv(n, warps * FRAG_ROWS), blocks // (block_k // FRAG_PAIRS), 1
    while split < 8 and tiles * split < 4 * sms and steps // (split * 2) >= 2:
        split *= 2
    common = {"BLOCK_K": block_k, "SPLIT_K": split, "num_warps": warps, "DECODE": "int",
              "ESC_CHUNK": 1, "PREFETCH": 0, "num_stages": 1}
    if m == 1:
        return {"kernel": "gemv", **common}
    return {"kernel": "mma", **common, "BLOCK_T": min(64, max(8, next_pow2(m))), "MMA_V2": 0,
            "CHAINS": 1, "ROWS_PER_WARP": FRAG_ROWS, "ESC_EARLY": 0, "WGMMA": 0, "ESC_PARTS": 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(kb.SHAPES))
    parser.add_argument("--m", default="1,3" if CPU_SMOKE else "1,4,16")
    parser.add_argument("--rounds", type=int, default=1 if CPU_SMOKE else 3)
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    op = get_op("w12f_gemm")
    table = {} if CPU_SMOKE else {
        (row["shape"], row["M"]): complete_config(op.space, row["w12f_gemm"]["best"]["config"])
        for row in json.loads(TABLE.read_text())["rows"]}
    report = {"fingerprint": current(str(kb.DEV)).to_dict(), "note": args.note, "rows": []}
    sms = num_sms(kb.DEV)
    for shape in args.shapes.split(","):
        k, n = kb.SHAPES[shape]
        for m in (int(v) for v in args.m.split(",")):
            now = op.space.default_config(m, n, k, sms)
            configs = {"previous": previous_default(m, n, k, sms), "current": now,
                       "current_int": {**now, "DECODE": "int"}}
            if (shape, m) in table:
                configs["table_best"] = table[(shape, m)]
            copies = min(kb.MAX_COPIES, num_copies_for(n * k * 3 // 2))
            case = op.make_case(m, n, k, kb.DEV, 0, copies)
            times: dict[str, list[float]] = {name: [] for name in configs}
            states = {}
            for _ in range(args.rounds):
                for name, config in configs.items():
                    state, timing, detail = evaluate(op, case, config, kb.DEV, kb.REPS)
                    states[name] = state if state == "ok" else f"{state}: {detail[:200]}"
                    if timing is not None:
                        times[name].append(timing.p50_us)
            med = {name: statistics.median(v) if v else None for name, v in times.items()}
            row = {"shape": shape, "m": m, "configs": configs, "states": states, "p50_us": times,
                   "median_us": med}
            if med["previous"] and med["current"]:
                row["current_over_previous"] = med["current"] / med["previous"]
            if med.get("table_best") and med["current"]:
                row["current_over_table_best"] = med["current"] / med["table_best"]
            if med["current_int"] and med["current"]:
                row["int_over_prmt"] = med["current_int"] / med["current"]
            report["rows"].append(row)
            print({key: row.get(key) for key in ("shape", "m", "median_us",
                                                 "current_over_previous",
                                                 "current_over_table_best", "int_over_prmt")},
                  flush=True)
            del case
        (OUT / "h200_w12f_default.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
