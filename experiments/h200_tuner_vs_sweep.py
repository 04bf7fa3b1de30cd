"""H200: does the Optuna tuner find configs beyond the hand-built sweep?

For each ``--rows`` entry (``op:shape:M``), one ``tune()`` study (trial isolation on) whose first
trials are the space's SWEEP configs valid at that row (the tuner enqueues them) and whose next
``--extra-trials`` distinct configs are the search's: TPE's proposals and the random valid configs
the tuner adds after an invalid proposal or a repeat (``source`` "tpe" / "random"). All trials of
a row are timed in the same trial process on the same weight copies, one after another, so the
best sweep config and the best config beyond it are a side-by-side comparison. Records every
trial (config, state, p50) and, per row, the best of each group (repeats left out) and their
ratio.

Run from the repository root (Optuna installed, e.g. from carried wheels)::

    python3 experiments/h200_tuner_vs_sweep.py --rows w12f_gemm:q3_gate_up:16 --extra-trials 24

``--cpu-smoke`` runs tiny shapes through the Triton interpreter (no timing value). Writes
``$OUT/h200_tuner_vs_sweep.json`` after each row.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

CPU_SMOKE = "--cpu-smoke" in sys.argv
if CPU_SMOKE:  # must precede the first triton import
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels_h200 as kb  # noqa: E402  (the decode shapes)

from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels.tuning.ops import space_of  # noqa: E402
from specpilot.kernels.tuning.ops import valid_sweep  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
DEVICE = "cpu" if CPU_SMOKE else "cuda"


def run_row(op: str, shape: str, m: int, extra: int, timeout_s: float, reps: int) -> dict:
    import optuna

    from specpilot.kernels.tuning.study import tune

    k, n = kb.SHAPES[shape]
    num_sweep = len(valid_sweep(space_of(op), m, n, k))
    directory = OUT / "tune"
    start = time.monotonic()
    [result] = tune(op, n, k, [m], trials=num_sweep + extra, device=DEVICE, reps=reps,
                    directory=directory, force=True, isolate=True, trial_timeout_s=timeout_s)
    wall_s = time.monotonic() - start
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
        str(directory / "optuna.journal")))
    study = optuna.load_study(study_name=result.study, storage=storage)
    trials = []
    for t in study.trials:
        if t.state == optuna.trial.TrialState.WAITING:
            continue
        state = t.user_attrs.get("state", "")
        if state.startswith("invalid"):
            continue
        # the sweep is enqueued first; later fixed configs are the tuner's random valid ones
        source = ("sweep" if t.number < num_sweep else
                  "random" if "fixed_params" in t.system_attrs else "tpe")
        trials.append({"number": t.number, "source": source, "state": state, "p50_us": t.value,
                       "config": t.user_attrs.get("config")})
    earlier: set[str] = set()
    for t in trials:  # a config proposed again (evaluated once, told twice)
        key = json.dumps(t["config"], sort_keys=True)
        t["repeat"] = key in earlier
        earlier.add(key)
    best = {}
    for group, sources in (("sweep", ("sweep",)), ("beyond", ("tpe", "random"))):
        done = [t for t in trials if t["source"] in sources and t["p50_us"] is not None
                and not t["repeat"]]
        best[group] = min(done, key=lambda t: t["p50_us"]) if done else None
    ratio = (best["beyond"]["p50_us"] / best["sweep"]["p50_us"]
             if best["beyond"] and best["sweep"] else None)
    states = {}
    for t in trials:
        states[f"{t['source']}:{t['state']}"] = states.get(f"{t['source']}:{t['state']}", 0) + 1
    return {"op": op, "shape": shape, "k": k, "n": n, "m": m, "num_sweep": num_sweep,
            "extra_trials": extra, "repeats": sum(t["repeat"] for t in trials),
            "num_invalid": result.num_invalid, "wall_s": round(wall_s, 1), "states": states,
            "best_sweep": best["sweep"], "best_beyond": best["beyond"],
            "beyond_over_sweep": ratio, "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="w12f_gemm:tiny_a:3" if CPU_SMOKE else
                        "w12f_gemm:q3_gate_up:16")
    parser.add_argument("--extra-trials", type=int, default=3 if CPU_SMOKE else 24)
    parser.add_argument("--timeout-s", type=float, default=20.0 if CPU_SMOKE else 60.0)
    parser.add_argument("--reps", type=int, default=2 if CPU_SMOKE else 15)
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(OUT / "tune", ignore_errors=True)  # fresh studies: no earlier run's trials
    report = {"fingerprint": current(DEVICE).to_dict(), "note": args.note, "rows": []}
    for entry in args.rows.split(","):
        op, shape, m = entry.split(":")
        row = run_row(op, shape, int(m), args.extra_trials, args.timeout_s, args.reps)
        report["rows"].append(row)
        print({k: v for k, v in row.items() if k != "trials"}, flush=True)
        (OUT / "h200_tuner_vs_sweep.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
