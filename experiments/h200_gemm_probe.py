"""H200: a grid of one GEMM kernel's configs at chosen shapes and M, with registers and spills.

Where the sweep (``kernels_h200.py``) times a handful of configs per op, this times every
combination of the values given on the command line, so a question like "does the W12 swap-AB
kernel slow down at M = 64 because its tiles spill?" gets one answer per config: its time
(CUDA-graph replays over rotating weight copies, median of 15, as the sweep), the reference check
(a wrong config is recorded and never timed, as in the tuner), and the compiled kernel's
registers per thread and spilled bytes.

Run from the repo root::

    python3 experiments/h200_gemm_probe.py --op w12_gemm --shapes q3_gate_up --m 16,64 \\
        --tiles 16x1,32x2,64x4 --grid BLOCK_K=32,64,128 --grid num_stages=3,5 \\
        --base kernel=dot,DECODE=prmt,SPLIT_K=1

``--shapes`` takes the sweep's names or ``KxN`` (e.g. ``2560x14336``: a projection of K inputs
and N outputs, to fit time = fixed cost + bytes / rate over K at one N). ``--tiles`` pairs
``BLOCK_N x num_warps`` (empty for ``w12f_gemm``, whose tiles are ``num_warps``
and ``ROWS_PER_WARP``: give them as ``--grid`` axes); ``--grid NAME=v1,v2`` adds one axis;
``--base`` fixes the other parameters (the space's ``ADDED_DEFAULTS`` fill what is left);
``--extra JSON`` times one more whole config beside them (a baseline of another kernel);
``--cublas`` (skinny_gemm) adds a torch.matmul row per shape and M. Writes
``$OUT/h200_gemm_probe.json`` after every shape; ``--cpu-smoke`` runs tiny shapes through the
Triton interpreter (no timing value).

The weights are the sweep's (outlier rate ``kernels_h200.OUTLIER_RATE``, about 2.75e-4 escapes)
unless ``--outlier-rate`` says otherwise (``none``: weights with no W12 escape at all,
``tuning.ops.synthetic_weight``, to time the GEMM without its escape work). Records before
2026-12-02 19:00 used the tuner's (1e-3, about 1e-3 escapes): the W12 escape epilogue weighs more
there, so compare within a file.
"""

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

CPU_SMOKE = "--cpu-smoke" in sys.argv
if CPU_SMOKE:  # must precede the first triton import
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernels_h200 as kb  # noqa: E402  (shapes, device, the checked timing)

import torch  # noqa: E402

from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels.common import bench  # noqa: E402
from specpilot.kernels.common.bench import num_copies_for  # noqa: E402
from specpilot.kernels.common.bench import time_calls  # noqa: E402
from specpilot.kernels.common.check import check_close  # noqa: E402
from specpilot.kernels.tuning.ops import complete_config  # noqa: E402
from specpilot.kernels.tuning.ops import get_op  # noqa: E402
from specpilot.kernels.tuning.study import evaluate  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def parse_value(text: str):
    """``"3"`` -> 3, anything else stays a string."""
    try:
        return int(text)
    except ValueError:
        return text


def shape_dims(name: str) -> tuple[int, int]:
    """``(K, N)`` of a sweep shape name or of ``"KxN"``."""
    if name in kb.SHAPES:
        return kb.SHAPES[name]
    try:
        k, n = (int(v) for v in name.split("x"))
    except ValueError:
        known = ", ".join(sorted(kb.SHAPES))
        raise SystemExit(f"unknown shape {name!r}: give one of {known} or KxN") from None
    return k, n


def grid_configs(base: dict, tiles: list[tuple[int, int]], axes: dict[str, list]) -> list[dict]:
    """Every combination: ``base`` with each (BLOCK_N, num_warps) tile (none: no tile axis) and
    each axis value."""
    names = list(axes)
    out = []
    tile_dicts = [{"BLOCK_N": n, "num_warps": w} for n, w in tiles] or [{}]
    for tile, values in itertools.product(tile_dicts, itertools.product(*axes.values())):
        out.append({**base, **tile, **dict(zip(names, values))})
    return out


def compiled_kernels(fn) -> dict:
    """``{id: (n_regs, n_spills)}`` of the kernels ``fn`` has compiled so far (empty under the
    interpreter, or when this Triton keeps them elsewhere)."""
    found = {}
    for cache in getattr(fn, "device_caches", {}).values():
        parts = cache if isinstance(cache, tuple) else (cache,)
        for part in parts:
            if not isinstance(part, dict):
                continue
            for kernel in part.values():
                if hasattr(kernel, "n_spills"):
                    found[id(kernel)] = (kernel.n_regs, kernel.n_spills)
    return found


def kernel_fns(op_name: str) -> list:
    """The op's Triton kernels (whichever a config launches)."""
    if op_name == "w12_gemm":
        from specpilot.kernels.w12_gemm import triton as mod
    elif op_name == "w12f_gemm":
        from specpilot.kernels.w12f_gemm import triton as mod
    else:
        from specpilot.kernels.skinny_gemm import triton as mod
    return [getattr(mod, name) for name in dir(mod)
            if name.endswith(("_gemv", "_dot", "_sk", "_mma", "_tma"))]


def compile_key(op, cfg: dict, m: int) -> str:
    """What picks the compiled kernel besides the config: the token tile (swap-AB) or the row
    count (GEMV) that M gives (M itself is not specialised)."""
    if cfg["kernel"] in ("dot", "dot_sk", "mma", "tma", "tma_sk"):
        tile = op.space.token_tile(cfg, m)
    else:
        tile = op.space.gemv_rows(m) if cfg["kernel"] == "gemv" else 1
    return json.dumps([cfg, tile], sort_keys=True)


def cublas_row(case, name: str, k: int, n: int, m: int, reps: int) -> dict:
    """torch.matmul (cuBLAS) on a bf16 case's weight copies: the check, then the timing."""
    calls = [lambda x=x, w=w: torch.matmul(x, w.T) for x, w in case.args]
    result = check_close("cublas", calls[0](), case.exact, case.abs_sum)
    timing = time_calls(calls, kb.DEV, reps=reps) if result.ok else None
    return {"shape": name, "K": k, "N": n, "M": m, "config": {"kernel": "cublas"},
            "state": "ok" if result.ok else "wrong", "detail": str(result),
            "p50_us": timing.p50_us if timing else None,
            "timing": timing.to_dict() if timing else None}


def probe_shape(op, name: str, k: int, n: int, ms: list[int], configs: list[dict],
                reps: int, registers: dict, outlier_rate: float,
                cublas: bool = False) -> list[dict]:
    """Rows for one shape; ``registers`` maps :func:`compile_key` to ``(n_regs, n_spills)`` across
    shapes, so a kernel compiled for an earlier row still reports its registers."""
    rows = []
    fns = kernel_fns(op.name)
    for m in ms:
        nbytes = n * k * (3 if op.name.startswith("w12") else 4) // 2
        copies = 2 if CPU_SMOKE else num_copies_for(nbytes)
        case = op.make_case(m, n, k, kb.DEV, 0, copies, outlier_rate=outlier_rate)
        if cublas:  # torch.matmul on the same copies, checked and timed the same way
            rows.append(cublas_row(case, name, k, n, m, reps))
        for cfg in configs:
            cfg = complete_config(op.space, cfg)
            try:
                op.space.validate(cfg, m, n, k)
            except ValueError as err:
                rows.append({"shape": name, "M": m, "config": cfg, "state": "invalid",
                             "detail": str(err)})
                continue
            before = {f: compiled_kernels(f) for f in fns}
            state, timing, detail = evaluate(op, case, cfg, kb.DEV, reps=reps)
            new = [v for f in fns for key, v in compiled_kernels(f).items()
                   if key not in before[f]]
            row = {"shape": name, "K": k, "N": n, "M": m, "config": cfg, "state": state,
                   "detail": detail, "p50_us": timing.p50_us if timing else None,
                   "timing": timing.to_dict() if timing else None}
            if new:
                registers[compile_key(op, cfg, m)] = new[0]
            if compile_key(op, cfg, m) in registers:
                row["n_regs"], row["n_spills"] = registers[compile_key(op, cfg, m)]
            rows.append(row)
            brief = {k_: row.get(k_) for k_ in ("shape", "M", "state", "p50_us", "n_regs",
                                                 "n_spills")}
            tile = {k_: cfg[k_] for k_ in ("BLOCK_N", "num_warps", "ROWS_PER_WARP", "BLOCK_K",
                                           "SPLIT_K", "num_stages", "CHAINS") if k_ in cfg}
            print(json.dumps({**brief, **tile}), flush=True)
        del case
        if kb.DEV.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def best_per(rows: list[dict]) -> list[dict]:
    """The fastest config per (shape, M)."""
    best = {}
    for r in rows:
        if r.get("p50_us") is None:
            continue
        key = (r["shape"], r["M"])
        if key not in best or r["p50_us"] < best[key]["p50_us"]:
            best[key] = r
    return [{"shape": s, "M": m, "p50_us": r["p50_us"], "config": r["config"],
             "n_regs": r.get("n_regs"), "n_spills": r.get("n_spills")}
            for (s, m), r in best.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=("skinny_gemm", "w12_gemm", "w12f_gemm"),
                        default="w12_gemm")
    parser.add_argument("--shapes", default=None,
                        help="sweep names or KxN (default q3_gate_up; tiny ones with --cpu-smoke)")
    parser.add_argument("--m", default="16")
    parser.add_argument("--tiles", default="32x2", help="BLOCK_N x num_warps pairs")
    parser.add_argument("--grid", action="append", default=[], help="NAME=v1,v2 (repeatable)")
    parser.add_argument("--base", default="kernel=dot", help="NAME=v,... fixed for every config")
    parser.add_argument("--extra", action="append", default=[],
                        help="one more whole config as JSON, timed beside the grid (repeatable)")
    parser.add_argument("--outlier-rate", type=lambda v: None if v == "none" else float(v),
                        default=kb.OUTLIER_RATE,
                        help="the weights' outliers (W12 escapes); default the sweep's; "
                             "none: no escape")
    parser.add_argument("--cublas", action="store_true",
                        help="skinny_gemm: also time torch.matmul at each shape and M")
    parser.add_argument("--warmup-ms", type=float, default=bench.WARMUP_MS,
                        help="GPU time each timing replays before it times (the timer's default)")
    parser.add_argument("--note", default="")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes, Triton interpreter")
    args = parser.parse_args()
    if not CPU_SMOKE and not torch.cuda.is_available():
        print("h200_gemm_probe.py needs a CUDA GPU (or --cpu-smoke)", file=sys.stderr)
        return 2
    bench.WARMUP_MS = args.warmup_ms  # every timing below, the tuner's evaluate included
    base = {kv.split("=")[0]: parse_value(kv.split("=")[1]) for kv in args.base.split(",")}
    tiles = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",") if t]
    axes = {g.split("=")[0]: [parse_value(v) for v in g.split("=")[1].split(",")]
            for g in args.grid}
    configs = grid_configs(base, tiles, axes) + [json.loads(c) for c in args.extra]
    op = get_op(args.op)
    default_shapes = ",".join(kb.SHAPES) if CPU_SMOKE else "q3_gate_up"
    shapes = (args.shapes or default_shapes).split(",")
    ms = [int(v) for v in args.m.split(",")]
    report = {"fingerprint": current(str(kb.DEV)).to_dict(), "note": args.note, "op": args.op,
              "outlier_rate": args.outlier_rate, "warmup_ms": args.warmup_ms,
              "argv": sys.argv[1:], "configs": len(configs), "rows": []}
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.time()
    registers = {}
    for name in shapes:
        k, n = shape_dims(name)
        report["rows"].extend(probe_shape(op, name, k, n, ms, configs, kb.REPS, registers,
                                          args.outlier_rate, args.cublas))
        report["best"] = best_per(report["rows"])
        report["elapsed_s"] = time.time() - start
        (OUT / "h200_gemm_probe.json").write_text(json.dumps(report, indent=1, default=str))
        print(f"[{time.strftime('%H:%M:%S')}] {name} done", file=sys.stderr, flush=True)
    for b in report["best"]:
        print(f"best {b['shape']:12s} M={b['M']:<3d} {b['p50_us']:8.1f} us regs {b['n_regs']} "
              f"spills {b['n_spills']} {json.dumps(b['config'])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
