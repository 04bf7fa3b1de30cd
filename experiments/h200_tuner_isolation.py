"""H200: the kernel tuner's trial isolation against a real device hang.

1. A :class:`~specpilot.kernels.tuning.isolate.TrialProcess` at ``q3_gdn_out`` (K 6144, N 5120),
   M 16, given configs A, A with ``_test_hang`` (a kernel spinning on a flag nothing sets: the
   device never drains its stream), B, then A again: each one's state and wall seconds (the hung
   one: the limit, the kill and the reaping; the one after it: a fresh process building its case),
   and after each whether this process's own CUDA context still computes a matmul correctly.
2. The same configs timed in the child and in this process (``InProcess``), alternating, three
   rounds: isolation must not change what is measured.
3. ``tune()`` end to end with Optuna (journal under ``$OUT/tune``): skinny_gemm at M 16, six
   trials with the hang flag alternating, then w12f_gemm at M 16, four trials without it.

Run from the repository root (Optuna and its dependencies installed, e.g. from carried wheels)::

    python3 experiments/h200_tuner_isolation.py [--timeout-s 45]

``--cpu-smoke`` runs tiny shapes through the Triton interpreter (no timing value). Writes
``$OUT/h200_tuner_isolation.json`` after each part.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

CPU_SMOKE = "--cpu-smoke" in sys.argv
if CPU_SMOKE:  # must precede the first triton import
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels.tuning.isolate import CaseSpec  # noqa: E402
from specpilot.kernels.tuning.isolate import InProcess  # noqa: E402
from specpilot.kernels.tuning.isolate import TrialProcess  # noqa: E402
from specpilot.kernels.tuning.ops import space_of  # noqa: E402
from specpilot.kernels.tuning.ops import valid_sweep  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
DEVICE = "cpu" if CPU_SMOKE else "cuda"
K, N, M = (72, 40, 3) if CPU_SMOKE else (6144, 5120, 16)  # q3_gdn_out


def context_works() -> bool:
    """This process's CUDA context (or the CPU) still computes a small matmul correctly."""
    try:
        a = torch.randn(64, 64, device=DEVICE)
        return bool(torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), rtol=1e-3, atol=1e-3))
    except Exception:  # noqa: BLE001 - a dead context is the answer, not a crash
        return False


def part_hang(report: dict, timeout_s: float) -> None:
    a, b = valid_sweep(space_of("skinny_gemm"), M, N, K)[:2]
    rows = []
    runner = TrialProcess(CaseSpec("skinny_gemm", M, N, K, DEVICE), reps=15, timeout_s=timeout_s)
    with runner:
        for label, config in (("A", a), ("A+hang", {**a, "_test_hang": True}), ("B", b),
                              ("A again", a)):
            start = time.monotonic()
            state, timing, detail = runner.evaluate(config)
            rows.append({"label": label, "config": config, "state": state,
                         "p50_us": timing.p50_us if timing else None, "detail": detail[:300],
                         "wall_s": round(time.monotonic() - start, 2),
                         "processes_started": runner.num_started,
                         "parent_context_works": context_works()})
            print(rows[-1], flush=True)
    report["hang"] = {"timeout_s": timeout_s, "rows": rows}


def part_timing(report: dict, timeout_s: float) -> None:
    configs = valid_sweep(space_of("skinny_gemm"), M, N, K)[:2]
    spec = CaseSpec("skinny_gemm", M, N, K, DEVICE, copies=1 if CPU_SMOKE else 8)
    rows = []
    with TrialProcess(spec, reps=15, timeout_s=timeout_s) as child, InProcess(spec, 15) as here:
        for rnd in range(3):
            for i, config in enumerate(configs):
                for where, runner in (("child", child), ("parent", here)):
                    state, timing, _ = runner.evaluate(config)
                    rows.append({"round": rnd, "config": i, "where": where, "state": state,
                                 "p50_us": timing.p50_us if timing else None})
    summary = {}
    for i in range(len(configs)):
        for where in ("child", "parent"):
            vals = sorted(r["p50_us"] for r in rows if r["config"] == i and r["where"] == where
                          and r["p50_us"] is not None)
            summary[f"config{i}_{where}_median_us"] = vals[len(vals) // 2] if vals else None
    report["timing"] = {"configs": configs, "rows": rows, "summary": summary}
    print(summary, flush=True)


def part_tune(report: dict, timeout_s: float) -> None:
    import optuna

    from specpilot.kernels.tuning.study import tune

    directory = OUT / "tune"
    out = []
    for op, trials, extra in (("skinny_gemm", 6, {"_test_hang": [False, True]}),
                              ("w12f_gemm", 4, None)):
        start = time.monotonic()
        [result] = tune(op, N, K, [M], trials=trials, device=DEVICE, reps=15,
                        directory=directory, force=True, extra_params=extra, isolate=True,
                        trial_timeout_s=timeout_s)
        wall_s = time.monotonic() - start
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(
            str(directory / "optuna.journal")))
        study = optuna.load_study(study_name=result.study, storage=storage)
        trials_run = [{"state": t.user_attrs.get("state"), "value": t.value,
                       "hang": t.user_attrs.get("config", {}).get("_test_hang")}
                      for t in study.trials if t.state != optuna.trial.TrialState.WAITING]
        out.append({"op": op, "wall_s": round(wall_s, 1), "best": result.config,
                    "p50_us": result.timing.p50_us if result.timing else None,
                    "num_ok": result.num_ok, "num_failed": result.num_failed,
                    "trials": trials_run, "parent_context_works": context_works()})
        print(out[-1], flush=True)
    report["tune"] = out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout-s", type=float, default=8.0 if CPU_SMOKE else 45.0)
    parser.add_argument("--parts", default="hang,timing,tune")
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    report = {"fingerprint": current(DEVICE).to_dict(), "note": args.note,
              "shape": {"k": K, "n": N, "m": M}}
    context_works()  # this process holds a context before any child is killed
    parts = {"hang": part_hang, "timing": part_timing, "tune": part_tune}
    for name in args.parts.split(","):
        parts[name](report, args.timeout_s)
        (OUT / "h200_tuner_isolation.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
