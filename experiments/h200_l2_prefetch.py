"""H200: does asking L2 for a decode GEMM's next K steps before its PDL wait (``L2_PREFETCH``) pay?

Per decode shape (Qwen3.8-27B and Muse-Glimmer-30B projections, ``kernels_h200.SHAPES``) and M, for
the bf16 Triton GEMM and the W12 GEMM, a few base configs (the last sweeps' winners), each at
every ``--l2`` value:

- checked: the output is bit-identical to the same config at ``L2_PREFETCH = 0`` (a prefetch moves
  bytes earlier, never a result), and the base config passes the fp64 reference check;
- timed two ways, CUDA-graph replays over rotating weight copies (median of 15):
  ``back_to_back``: the GEMM alone, call after call (how the sweep and the tuner time);
  ``after_norm``: each call preceded by the fused add + RMSNorm that produces its input (PDL, as in
  a decoder layer), the pair's time.

cuBLAS (``torch.matmul``) is timed on the same shapes for reference. Writes
``$OUT/h200_l2_prefetch.json`` after every shape. Run from the repo root:
``python3 experiments/h200_l2_prefetch.py [--shapes q3_gdn_out,...] [--m 1,16] [--l2 0,2,8,64]``.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels_h200 as kb  # noqa: E402  (the shapes, the device, cuBLAS timing)

from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels.add_rms_norm.triton import add_rms_norm_triton  # noqa: E402
from specpilot.kernels.common.bench import num_copies_for  # noqa: E402
from specpilot.kernels.common.bench import time_calls  # noqa: E402
from specpilot.kernels.common.check import check_close  # noqa: E402
from specpilot.kernels.tuning.ops import get_op  # noqa: E402
from l2_sweep import BASES  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
REPS = 15


def valid(op, cfg, m, n, k) -> bool:
    try:
        op.space.validate(cfg, m, n, k)
    except ValueError:
        return False
    return True


def run_shape(name: str, k: int, n: int, ms: list[int], l2s: list[int]) -> list[dict]:
    """Rows for one shape: per M, op, base config and L2_PREFETCH value."""
    rows = []
    for m in ms:
        h = torch.randn((m, k), device=kb.DEV).to(torch.bfloat16)
        d = torch.randn((m, k), device=kb.DEV).to(torch.bfloat16)
        norm_w = torch.ones(k, device=kb.DEV, dtype=torch.bfloat16)

        def norm(h=h, d=d, norm_w=norm_w):
            return add_rms_norm_triton(h, d, norm_w, 1e-6, 0.0, False)[1]

        for op_name in ("skinny_gemm", "w12_gemm"):
            op = get_op(op_name)
            nbytes = n * k * (3 if op_name == "w12_gemm" else 4) // 2
            case = op.make_case(m, n, k, kb.DEV, 0, num_copies_for(nbytes))
            if op_name == "skinny_gemm":
                calls = [lambda a=a: torch.matmul(a[0], a[1].t()) for a in case.args]
                rows.append({"shape": name, "K": k, "N": n, "M": m, "op": "cublas",
                             "back_to_back_us": time_calls(calls, kb.DEV, REPS).p50_us})
            for base in BASES[(op_name, m == 1)]:
                if not valid(op, {**base, "L2_PREFETCH": 0}, m, n, k):
                    continue
                ref = op.launcher(*case.args[0], config={**base, "L2_PREFETCH": 0})
                check = check_close(op_name, ref, case.exact, case.abs_sum)
                for l2 in l2s:
                    cfg = {**base, "L2_PREFETCH": l2}
                    row = {"shape": name, "K": k, "N": n, "M": m, "op": op_name, "config": cfg,
                           "reference_check": str(check), "ok": check.ok}
                    out = op.launcher(*case.args[0], config=cfg)
                    row["bit_identical_to_l2_0"] = bool(torch.equal(out, ref))
                    if row["ok"] and row["bit_identical_to_l2_0"]:
                        f = op.launcher
                        calls = [lambda a=a, c=cfg, f=f: f(*a, config=c) for a in case.args]
                        row["back_to_back_us"] = time_calls(calls, kb.DEV, REPS).p50_us
                        paired = [lambda a=a, c=cfg, f=f: f(norm(), a[1], config=c)
                                  for a in case.args]
                        row["after_norm_us"] = time_calls(paired, kb.DEV, REPS).p50_us
                    rows.append(row)
                    print(json.dumps({k_: v for k_, v in row.items()
                                      if k_ not in ("reference_check", "K", "N")}), flush=True)
            del case
            torch.cuda.empty_cache()
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per (shape, M, op, base config): the time at L2_PREFETCH 0 and the best other value."""
    groups = {}
    for r in rows:
        if "back_to_back_us" not in r or r["op"] == "cublas":
            continue
        base = {k: v for k, v in r["config"].items() if k != "L2_PREFETCH"}
        key = (r["shape"], r["M"], r["op"], json.dumps(base, sort_keys=True))
        groups.setdefault(key, []).append(r)
    out = []
    for (shape, m, op, base), rs in groups.items():
        off = next((r for r in rs if r["config"]["L2_PREFETCH"] == 0), None)
        if off is None:
            continue
        for mode in ("back_to_back_us", "after_norm_us"):
            best = min(rs, key=lambda r: r[mode])
            out.append({"shape": shape, "M": m, "op": op, "base": json.loads(base), "mode": mode,
                        "l2_0_us": off[mode], "best_l2": best["config"]["L2_PREFETCH"],
                        "best_us": best[mode], "ratio": best[mode] / off[mode]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(kb.SHAPES))
    parser.add_argument("--m", default="1,16")
    parser.add_argument("--l2", default="0,2,8,64")
    parser.add_argument("--note", default="")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes, Triton "
                        "interpreter, integer decode, no prefetch: proves the script runs")
    args = parser.parse_args()
    ms = [int(v) for v in args.m.split(",")]
    l2s = [int(v) for v in args.l2.split(",")]
    if args.cpu_smoke:
        global REPS
        args.shapes, l2s, REPS = ",".join(kb.SHAPES), [0, 0], 1
        for bases in BASES.values():
            bases[:] = [{**b, "DECODE": "int"} if "DECODE" in b else b for b in bases]
    report = {"fingerprint": current(str(kb.DEV)).to_dict(), "note": args.note, "rows": []}
    start = time.time()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.shapes.split(","):
        k, n = kb.SHAPES[name]
        report["rows"].extend(run_shape(name, k, n, ms, l2s))
        report["summary"] = summary(report["rows"])
        report["elapsed_s"] = time.time() - start
        (OUT / "h200_l2_prefetch.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"[{time.strftime('%H:%M:%S')}] {name} done", file=sys.stderr, flush=True)
    for s in report["summary"]:
        print(f"{s['shape']:12s} M={s['M']:<3d} {s['op']:12s} {s['mode']:16s} "
              f"l2=0 {s['l2_0_us']:7.1f} best l2={s['best_l2']:<3d} {s['best_us']:7.1f} "
              f"x{s['ratio']:.3f}  {s['base']['kernel']} {s['base']['BLOCK_N']}x"
              f"{s['base']['BLOCK_K']}", flush=True)


if __name__ == "__main__":
    main()
