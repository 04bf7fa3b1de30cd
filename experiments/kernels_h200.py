"""H200 kernel benchmark: cuBLAS vs tuned bf16 Triton vs W12 at Qwen3.8-27B / Muse-Glimmer-30B
decode shapes.

Run from the repository root (torch + triton + numpy only; no install, no optuna)::

    PYTHONPATH=. python3 experiments/kernels_h200.py            # writes $OUT/kernels_h200.json

1. Checks: W12 pack/unpack bit-exact on all 65,536 bf16 bit patterns and a real-shaped weight (both
   decodes), and every GEMM kernel family on odd shapes against the fp64 exact result.
2. Per shape and M in {1, 2, 4, 8, 16, 32, 64}: cuBLAS (torch.matmul), a short sweep of the bf16
   Triton GEMM (``skinny_gemm/space.py`` SWEEP + default) and of the W12 GEMM on both plane
   orders (``w12_gemm/space.py``: rows; ``w12f_gemm/space.py``: fragment order; the W12 goal
   takes the faster per row, recorded as ``w12_best_op``). Every config is checked against the
   exact result before it is timed (a wrong one is recorded, never timed). Timing: CUDA-graph
   replays (median of 15) over rotating weight copies (>= 3, and >= 3x L2 per round), so each
   call streams its weights from HBM.
3. Writes one JSON (environment fingerprint, checks, per-row roofline records, goal verdicts) after
   every shape, and prints a compact table last. A wall-clock budget (``--budget-s``) stops new
   sweep configs once spent, reusing the best config found so far for the remaining rows (their
   op records say ``cut_short``, and the tuned-cache seeding skips them).

``--cpu-smoke`` runs the same code on tiny shapes through the Triton interpreter (no timing value;
it only proves the script runs; tests/kernels/test_h200_script.py uses it).
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
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import specpilot

# Uninstalled checkout: specpilot.kernels lives in ./kernels (pyproject package-dir mapping).
specpilot.__path__.append(str(ROOT))

import torch

from specpilot.fingerprint import current
from specpilot.kernels import w12
from specpilot.kernels.common.bench import num_copies_for
from specpilot.kernels.common.bench import time_calls
from specpilot.kernels.common.check import check_close
from specpilot.kernels.common.check import gemm_exact
from specpilot.kernels.common.roofline import CEILINGS
from specpilot.kernels.common.roofline import ceiling_for
from specpilot.kernels.common.roofline import gemm_traffic
from specpilot.kernels.common.roofline import place
from specpilot.kernels.tuning import ops as tuning_ops
from specpilot.kernels.tuning.ops import Case
from specpilot.kernels.tuning.ops import get_op
from specpilot.kernels.tuning.ops import synthetic_weight
from specpilot.kernels.tuning.study import evaluate
from specpilot.kernels.w12 import reference as w12_ref
from specpilot.kernels.w12.format import GEMM_FOR_ORDER
from specpilot.kernels.w12.triton import w12_pack
from specpilot.kernels.w12.triton import w12_unpack

SHAPES = {  # name: (K, N), from measurements/h200-2026-11-29-anchors.json
    "q3_attn_qkvg": (5120, 14336), "q3_gdn_in": (5120, 16480), "q3_gdn_out": (6144, 5120),
    "q3_gate_up": (5120, 34816), "q3_down": (17408, 5120), "q3_lm_head": (5120, 248320),
    "mg_gate_up": (6656, 39936), "mg_down": (19968, 6656),
}
MS = (1, 2, 4, 8, 16, 32, 64)
CHECK_SHAPES = ((1, 4099, 1000), (3, 4099, 1000), (17, 2050, 777), (64, 1027, 333))  # M, K, N
REAL_CHECK = (5120, 6144)  # N, K of the real-shaped W12 round-trip check (q3_gdn_out)
if CPU_SMOKE:
    SHAPES = {"tiny_a": (96, 80), "tiny_b": (130, 48)}
    MS = (1, 3, 16)
    CHECK_SHAPES = ((1, 99, 50), (3, 99, 50), (17, 50, 37))
    REAL_CHECK = (64, 96)
REPS = 2 if CPU_SMOKE else 15
MAX_COPIES = 2 if CPU_SMOKE else 64
LARGE_BYTES = 150e6  # "large projection": bf16 weight of at least 150 MB
OUTLIER_RATE = tuning_ops.OUTLIER_RATE  # about 2.75e-4 escapes, as big LLMs' 1.8-5e-4
GOAL_LABELS = {"triton_not_slower_than_cublas": "tri<=cub",
               "triton_ge_90pct_read_ceiling": "tri>=90%", "w12_le_0.80x_best_bf16": "w12<=0.8x"}
DEV = torch.device("cpu" if CPU_SMOKE else "cuda")
W12_OPS = tuple(GEMM_FOR_ORDER.values())  # the W12 GEMM on each plane order
ORDER_OF_OP = {op: order for order, op in GEMM_FOR_ORDER.items()}


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def bits_equal(a, b):
    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def run_checks():
    """Phase 1: W12 round trips and every kernel family on odd shapes. Returns check records."""
    records = []
    patterns = torch.arange(-32768, 32768, dtype=torch.int32, device=DEV).to(torch.int16)
    tensors = {"all_bf16_bit_patterns": patterns.view(torch.bfloat16).reshape(256, 256),
               "real_shape_synthetic": synthetic_weight(*REAL_CHECK, DEV, 1,
                                                        outlier_rate=OUTLIER_RATE)}
    for name, w in tensors.items():
        packed = w12_pack(w)
        ref = w12_ref.w12_pack_ref(w)
        same_planes = all(torch.equal(getattr(packed, f), getattr(ref, f))
                          for f in ("planes", "row_ptr", "esc_col", "esc_bits"))
        records.append({"check": f"w12 pack planes == reference: {name}", "ok": same_planes})
        # The interpreter cannot run inline PTX.
        for decode in ("int",) if CPU_SMOKE else ("int", "prmt"):
            cfg = {"BLOCK_R": 4, "BLOCK_J": min(512, packed.block_pairs), "num_warps": 4,
                   "DECODE": decode}
            try:
                ok, detail = bits_equal(w12_unpack(packed, config=cfg), w), ""
            # A PTX decode that fails to compile fails the check, whatever the exception.
            except Exception as err:  # noqa: BLE001
                ok, detail = False, f"{type(err).__name__}: {err}"[:300]
            records.append({"check": f"w12 unpack bit-exact ({decode}): {name}", "ok": ok,
                            "detail": detail, "escape_rate": packed.escape_rate})
        frag = w12.pack(w, order="frag")
        records.append({"check": f"w12 frag-order unpack bit-exact: {name}",
                        "ok": bits_equal(frag.unpack(), w)})
    for op_name in ("skinny_gemm", *W12_OPS):
        op = get_op(op_name)
        for m, k, n in CHECK_SHAPES:
            case = op.make_case(m, n, k, DEV, 2)
            default = op.space.default_config(m, n, k)
            decodes = op.space.PARAMS[default["kernel"]].get("DECODE", [])
            ptx = [] if CPU_SMOKE else [d for d in decodes if d != "int"]
            configs = [default] + [{**default, "DECODE": d} for d in ptx]
            for cfg in configs:
                state, _, detail = evaluate(op, case, cfg, DEV, reps=0, timed=False)
                records.append({"check": f"{op_name} M{m}-K{k}-N{n} {cfg}", "ok": state == "ok",
                                "state": state, "detail": detail})
    return records


def sweep(op, case, m, n, k, ceiling, state):
    """Check, then time, the op's default and SWEEP configs valid for M; returns the record."""
    candidates = []
    for cfg in [op.space.default_config(m, n, k)] + list(op.space.SWEEP):
        try:
            op.space.validate(cfg, m, n, k)
        except ValueError:
            continue
        if cfg not in candidates:
            candidates.append(cfg)
    cut_short = state["over_budget"] and bool(state["best"].get(op.name))
    if cut_short:
        candidates = [c for c in candidates if c == state["best"][op.name]] or candidates[:1]
    tried, best = [], None
    for cfg in candidates:
        key = json.dumps(cfg, sort_keys=True)
        if key in state["broken"]:
            tried.append({"config": cfg, "state": "error (earlier)",
                          "detail": state["broken"][key]})
            continue
        verdict, timing, detail = evaluate(op, case, cfg, DEV, reps=REPS)
        if verdict == "error":
            state["broken"][key] = detail
        tried.append({"config": cfg, "state": verdict, "detail": detail,
                      "timing": timing.to_dict() if timing else None})
        if timing is not None and (best is None or timing.p50_us < best["timing"].p50_us):
            best = {"config": cfg, "timing": timing}
    record = {"best": None, "sweep": tried, "cut_short": cut_short}
    if best is not None:
        state["best"][op.name] = best["config"]
        roof = place(op.name, m, n, k, case.traffic, best["timing"], ceiling)
        record["best"] = {"config": best["config"], "timing": best["timing"].to_dict(),
                          "roofline": roof.to_dict()}
    return record


def bench_shape(name, k, n, ms, ceiling, state):
    """Phase 2 for one weight shape: cuBLAS, bf16 Triton sweep and W12 sweep at every M."""
    w = synthetic_weight(n, k, DEV, 0, outlier_rate=OUTLIER_RATE)
    t0 = time.time()
    packed = w12.pack(w)
    sync()
    pack_s = time.time() - t0
    x_all = torch.randn((max(ms), k), device=DEV).to(torch.bfloat16)
    exact_all, abs_all = gemm_exact(x_all, w)
    num_bf16 = num_copies_for(w.numel() * 2, minimum=min(3, MAX_COPIES), maximum=MAX_COPIES)
    num_w12 = num_copies_for(packed.nbytes, minimum=min(3, MAX_COPIES), maximum=MAX_COPIES)
    bf16_copies = [w] + [w.clone() for _ in range(num_bf16 - 1)]
    w12_copies = [packed] + [packed.clone() for _ in range(num_w12 - 1)]
    frag = packed.with_order("frag")
    frag_copies = [frag] + [frag.clone() for _ in range(num_w12 - 1)]
    info = {"w12_nbytes": packed.nbytes, "w12_base": packed.base,
            "w12_escape_rate": packed.escape_rate, "w12_pack_s": pack_s,
            "bf16_copies": len(bf16_copies), "w12_copies": len(w12_copies)}
    rows = []
    ops = {name: get_op(name) for name in ("skinny_gemm", *W12_OPS)}
    for m in ms:
        state["over_budget"] = time.time() - state["start"] > state["budget_s"]
        x = x_all[:m].contiguous()
        exact, abs_sum = exact_all[:m], abs_all[:m]
        row = {"shape": name, "K": k, "N": n, "M": m, **info}
        cublas = [lambda wc=wc, x=x: torch.matmul(x, wc.T) for wc in bf16_copies]
        res = check_close("cublas", cublas[0](), exact, abs_sum)
        timing = time_calls(cublas, DEV, reps=REPS)
        traffic = gemm_traffic(m, n, k, 2 * n * k)
        row["cublas"] = {"ok": res.ok, "detail": str(res), "timing": timing.to_dict(),
                         "roofline": place("cublas", m, n, k, traffic, timing, ceiling).to_dict()}
        for op_name, copies, wbytes in (("skinny_gemm", bf16_copies, 2 * n * k),
                                        ("w12_gemm", w12_copies, packed.nbytes),
                                        ("w12f_gemm", frag_copies, frag.nbytes)):
            case = Case(m, n, k, [(x, c) for c in copies], exact, abs_sum,
                        gemm_traffic(m, n, k, wbytes))
            row[op_name] = sweep(ops[op_name], case, m, n, k, ceiling, state)
        rows.append(verdicts(row))
        print(f"  {name} M={m}: {time.time() - state['start']:.0f}s", flush=True)
    return rows


def best_w12(row):
    """The faster W12 GEMM of the row (either plane order; a deployment packs one order per
    weight group, the recipe's ``w12_order``), with its op name."""
    found = [{**row[op]["best"], "op": op} for op in W12_OPS if row.get(op, {}).get("best")]
    return min(found, key=lambda b: b["timing"]["p50_us"], default=None)


def verdicts(row):
    """Attach the issue's goals to one row."""
    cub = row["cublas"]["timing"]["p50_us"]
    tri = row["skinny_gemm"]["best"]
    wq = best_w12(row)
    tri_us = tri["timing"]["p50_us"] if tri else None
    best_bf16 = min(cub, tri_us) if tri_us else cub
    goals = {"triton_not_slower_than_cublas": tri_us is not None and tri_us <= cub}
    if 2 * row["N"] * row["K"] >= LARGE_BYTES:
        frac = tri["roofline"]["frac_read_ceiling"] if tri else None
        goals["triton_ge_90pct_read_ceiling"] = frac is not None and frac >= 0.90
    if row["M"] <= 16:
        w12_us = wq["timing"]["p50_us"] if wq else None
        goals["w12_le_0.80x_best_bf16"] = w12_us is not None and w12_us <= 0.80 * best_bf16
    row["ratios"] = {"triton_over_cublas": tri_us / cub if tri_us else None,
                     "w12_over_best_bf16": wq["timing"]["p50_us"] / best_bf16 if wq else None,
                     **{f"{op}_over_best_bf16": row[op]["best"]["timing"]["p50_us"] / best_bf16
                        for op in W12_OPS if row.get(op, {}).get("best")}}
    row["w12_best_op"] = wq["op"] if wq else None
    row["goals"] = goals
    return row


def table(rows):
    head = (f"{'shape':<13}{'M':>3} {'cuBLAS':>8} {'TB/s':>5} {'triton':>8} {'TB/s':>5} "
            f"{'%ceil':>5} {'w12':>8} {'w12/bf16':>8} {'ord':>4}  goals")
    lines = [head, "-" * len(head)]
    for r in rows:
        tri, wq = r["skinny_gemm"]["best"], best_w12(r)
        cub = r["cublas"]["roofline"]
        t_us = f"{tri['timing']['p50_us']:8.1f}" if tri else f"{'FAIL':>8}"
        t_bw = f"{tri['roofline']['tb_s']:5.2f}" if tri else f"{'-':>5}"
        t_pct = f"{100 * tri['roofline']['frac_read_ceiling']:5.0f}" if tri else f"{'-':>5}"
        w_us = f"{wq['timing']['p50_us']:8.1f}" if wq else f"{'FAIL':>8}"
        ratio = r["ratios"]["w12_over_best_bf16"]
        w_rat = f"{ratio:8.2f}" if ratio else f"{'-':>8}"
        marks = " ".join(("" if v else "MISS ") + GOAL_LABELS[g] for g, v in r["goals"].items())
        order = ORDER_OF_OP.get(wq["op"] if wq else "", "-")
        lines.append(f"{r['shape']:<13}{r['M']:>3} {cub['p50_us']:8.1f} {cub['tb_s']:5.2f} {t_us} "
                     f"{t_bw} {t_pct} {w_us} {w_rat} {order:>4}  {marks}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    parser.add_argument("--m", default=",".join(map(str, MS)), help="comma-separated M values")
    parser.add_argument("--budget-s", type=float, default=270.0,
                        help="wall seconds after which no new sweep configs are tried")
    parser.add_argument("--out", default=None, help="JSON path (default $OUT/kernels_h200.json)")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes, Triton interpreter")
    parser.add_argument("--l2", default="", help="L2_PREFETCH values whose variants of the "
                        "l2_sweep.BASES configs join both sweeps (e.g. 2,8,64; GPU only)")
    args = parser.parse_args()
    if not CPU_SMOKE and not torch.cuda.is_available():
        print("kernels_h200.py needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.l2:
        from l2_sweep import extend_sweeps

        print(f"L2_PREFETCH variants added to the sweeps: "
              f"{extend_sweeps([int(v) for v in args.l2.split(',')])}", flush=True)
    out_path = Path(args.out or Path(os.environ.get("OUT", ".")) / "kernels_h200.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fp = current(DEV.type)
    ceiling = ceiling_for(fp.gpu) or CEILINGS["NVIDIA H200"]
    state = {"start": time.time(), "budget_s": args.budget_s, "over_budget": False,
             "best": {}, "broken": {}}
    report = {"fingerprint": fp.to_dict(), "kernel_key": fp.kernel_key(),
              "ceiling": vars(ceiling),
              "ceiling_measured_on_this_sku": ceiling_for(fp.gpu) is not None,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "checks": [], "rows": []}
    print(f"{fp.gpu} cc{fp.compute_capability} driver {fp.driver} cuda {fp.cuda} torch {fp.torch} "
          f"triton {fp.triton}", flush=True)
    report["checks"] = run_checks()
    bad = [c["check"] for c in report["checks"] if not c["ok"]]
    print(f"checks: {len(report['checks']) - len(bad)}/{len(report['checks'])} ok"
          + "".join(f"\n  FAILED {b}" for b in bad), flush=True)
    ms = [int(v) for v in args.m.split(",")]
    for name in args.shapes.split(","):
        k, n = SHAPES[name]
        state["best"] = {}
        report["rows"].extend(bench_shape(name, k, n, ms, ceiling, state))
        report["elapsed_s"] = time.time() - state["start"]
        report["budget_exhausted"] = state["over_budget"]
        out_path.write_text(json.dumps(report, indent=1, default=str))
        torch.cuda.empty_cache()
    goals = {}
    for row in report["rows"]:
        for g, v in row["goals"].items():
            goals.setdefault(g, [0, 0])[0 if v else 1] += 1
    report["goal_summary"] = {g: {"met": a, "missed": b} for g, (a, b) in goals.items()}
    out_path.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {out_path} in {report['elapsed_s']:.0f}s; goals met/missed: "
          + ", ".join(f"{g} {a}/{b}" for g, (a, b) in goals.items()))
    print(table(report["rows"]))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
