"""H200: what the kernel timer charges a call besides its own work -- the same calls under four
timers, interleaved, so issue 3's per-row numbers can be read against a decode step's costs.

The harness (``kernels/common/bench.py``) timed a CUDA-graph replay of one call per rotating
weight copy (3 for the large projections) between two events. Two costs there are the timer's,
not the kernel's: the host's graph launch lands between the events when the GPU is idle at the
start event, and each replay boundary is a point where PDL cannot overlap two kernels. A decode
step is one graph of hundreds of kernels and pays both once. The timers:

- ``replay``: the harness as the kernels_h200 records before 0eefdc4 used it (one call per copy,
  GPU idle at the start event);
- ``queued``: the same replay queued behind a GPU-side sleep, so the start event fires just
  before the first kernel;
- ``long``: at least 24 calls per replay;
- ``queued_long``: both.

Per shape: a plain streaming read of the bf16 weight's own bytes (``h200_read_floor``'s kernel,
serial and launched with PDL: waiting first, or not waiting at all -- the most that overlapping
consecutive calls could give, a read has no producer), and at each M cuBLAS, the bf16 Triton
winner and the best W12 winner of ``--baseline`` (a kernels_h200.py record), each checked against
the fp64 result first. Writes ``$OUT/h200_timer.json`` with every round, the medians and per
timer the issue's per-row ratios.

    python3 experiments/h200_timer.py --baseline experiments/results/X.json [--m 1,4,16]
"""

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents  # noqa: E402
from triton.language.extra.cuda import gdc_wait  # noqa: E402

import kernels_h200 as kb  # noqa: E402  (shapes, best_w12)
from h200_read_floor import read_call  # noqa: E402
from h200_read_floor import xor_chunk  # noqa: E402
from h200_w12_frag import run_shapes  # noqa: E402
from h200_w12_frag import side_by_side_args  # noqa: E402
from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels import w12  # noqa: E402
from specpilot.kernels.common.bench import num_copies_for  # noqa: E402
from specpilot.kernels.common.bench import time_calls  # noqa: E402
from specpilot.kernels.common.check import check_close  # noqa: E402
from specpilot.kernels.common.check import gemm_exact  # noqa: E402
from specpilot.kernels.common.roofline import CEILINGS  # noqa: E402
from specpilot.kernels.common.roofline import gemm_traffic  # noqa: E402
from specpilot.kernels.tuning.ops import complete_config  # noqa: E402
from specpilot.kernels.tuning.ops import get_op  # noqa: E402
from specpilot.kernels.tuning.ops import synthetic_weight  # noqa: E402

READ_TB_S = CEILINGS["NVIDIA H200"].read_tb_s
TIMERS = {"replay": {"queued": False}, "queued": {"queued": True},
          "long": {"queued": False, "min_calls": 24},
          "queued_long": {"queued": True, "min_calls": 24}}
READ_CFG = (16384, 1024, 4, 1)  # bytes per program, words per step, warps, stages


@triton.jit
def read_kernel_pdl(src_ptr, out_ptr, n_words, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                    WAIT: tl.constexpr):
    """``h200_read_floor.read_kernel`` launched with PDL: lets the next kernel launch at once,
    and waits for the previous one first only if ``WAIT``."""
    if WAIT:
        gdc_wait()
    gdc_launch_dependents()
    xor_chunk(src_ptr, out_ptr, n_words, CHUNK, BLOCK)


def read_pdl_call(buf: torch.Tensor, out: torch.Tensor, wait: bool) -> torch.Tensor:
    chunk_bytes, block, warps, stages = READ_CFG
    words = buf.numel()
    read_kernel_pdl[(triton.cdiv(words, chunk_bytes // 4),)](
        buf, out, words, CHUNK=chunk_bytes // 4, BLOCK=block, WAIT=wait, num_warps=warps,
        num_stages=stages, launch_pdl=True)
    return out


def baseline_rows(path: str) -> dict:
    """``(shape, M) -> (bf16 Triton config, (W12 op, config))``: a kernels_h200 record's
    winners, completed with the options their kernels gained since."""
    rows = json.loads(Path(path).read_text())["rows"]
    found = {}
    for r in rows:
        best = kb.best_w12(r)
        if r["skinny_gemm"]["best"] and best:
            found[r["shape"], r["M"]] = (
                complete_config(get_op("skinny_gemm").space, r["skinny_gemm"]["best"]["config"]),
                (best["op"], complete_config(get_op(best["op"]).space, best["config"])))
    return found


def bench_shape(name: str, ms: list[int], base: dict, rounds: int, reps: int) -> list[dict]:
    k, n = kb.SHAPES[name]
    dev = torch.device("cuda")
    w = synthetic_weight(n, k, dev, 0, outlier_rate=2e-4)
    packed = w12.pack(w)
    nb, nw = num_copies_for(2 * n * k), num_copies_for(packed.nbytes)
    bf16_copies = [w] + [w.clone() for _ in range(nb - 1)]
    w12_copies = {}  # per W12 op the winners use: its plane order's copies
    for op in {base[name, m][1][0] for m in ms if (name, m) in base}:
        planes = packed.with_order(kb.ORDER_OF_OP[op])
        w12_copies[op] = [planes] + [planes.clone() for _ in range(nw - 1)]
    words = [c.view(torch.int32).view(-1) for c in bf16_copies]  # the bf16 bytes, as words
    out = torch.empty(words[0].numel() // 4096 + 1, dtype=torch.int32, device=dev)
    calls = {"read": [lambda b=b: read_call(b, out, READ_CFG) for b in words],
             "read_pdl_wait": [lambda b=b: read_pdl_call(b, out, True) for b in words],
             "read_pdl_nowait": [lambda b=b: read_pdl_call(b, out, False) for b in words]}
    x_all = torch.randn((max(ms), k), device=dev).to(torch.bfloat16)
    exact_all, abs_all = gemm_exact(x_all, w)
    skinny = get_op("skinny_gemm").launcher
    checks, configs = {}, {}
    for m in ms:
        if (name, m) not in base:
            continue
        x = x_all[:m].contiguous()
        bf16_cfg, (w12_op, w12_cfg) = base[name, m]
        configs[m] = {"bf16": bf16_cfg, "w12_op": w12_op, "w12": w12_cfg}
        launch_w12 = get_op(w12_op).launcher
        for label, fns in (
                (f"cublas_m{m}", [lambda x=x, c=c: torch.matmul(x, c.T) for c in bf16_copies]),
                (f"bf16_m{m}", [lambda x=x, c=c, g=bf16_cfg: skinny(x, c, config=g)
                                for c in bf16_copies]),
                (f"w12_m{m}", [lambda x=x, c=c, f=launch_w12, g=w12_cfg: f(x, c, config=g)
                               for c in w12_copies[w12_op]])):
            res = check_close(label, fns[0](), exact_all[:m], abs_all[:m])
            checks[label] = {"ok": res.ok, "detail": str(res)}
            if res.ok:
                calls[label] = fns
    rounds_us = {lbl: {t: [] for t in TIMERS} for lbl in calls}
    for _ in range(rounds):
        for lbl, fns in calls.items():
            for t, opts in TIMERS.items():
                rounds_us[lbl][t].append(time_calls(fns, dev, reps=reps, **opts).p50_us)
    med = {lbl: {t: statistics.median(v) for t, v in per.items()}
           for lbl, per in rounds_us.items()}
    row = {"shape": name, "K": k, "N": n, "bytes_bf16": 2 * n * k, "bytes_w12": packed.nbytes,
           "copies_bf16": nb, "copies_w12": nw, "checks": checks, "configs": configs,
           "rounds_us": rounds_us, "median_us": med, "per_timer": {}}
    floor_read = 2 * n * k / READ_TB_S / 1e6
    for t in TIMERS:
        per = {lbl: floor_read / med[lbl][t] for lbl in ("read", "read_pdl_wait",
                                                          "read_pdl_nowait")}
        for m in configs:
            need = (f"cublas_m{m}", f"bf16_m{m}", f"w12_m{m}")
            if not all(lbl in med for lbl in need):
                continue
            cub, tri, w12_us = (med[lbl][t] for lbl in need)
            floor = gemm_traffic(m, n, k, 2 * n * k).bytes_moved / READ_TB_S / 1e6
            per[f"m{m}"] = {"triton_frac": floor / tri, "triton_over_cublas": tri / cub,
                            "w12_over_best_bf16": w12_us / min(tri, cub)}
        row["per_timer"][t] = per
    for t, per in row["per_timer"].items():
        print(f"{name:13} {t:11} read {per['read']:.3f} pdl-wait {per['read_pdl_wait']:.3f} "
              f"pdl-nowait {per['read_pdl_nowait']:.3f} | " + " ".join(
                  f"M={m}: tri {v['triton_frac']:.3f} /cub {v['triton_over_cublas']:.3f} "
                  f"w12 {v['w12_over_best_bf16']:.3f}"
                  for m, v in ((key[1:], val) for key, val in per.items() if key[0] == "m")),
              flush=True)
    return [row]


def main() -> int:
    args = side_by_side_args(__doc__, ",".join(kb.SHAPES), "1,4,16").parse_args()
    base = baseline_rows(args.baseline)
    ms = [int(a) for a in args.m.split(",")]
    record = {"fingerprint": current("cuda").to_dict(), "command": " ".join(sys.argv),
              "timers": TIMERS, "read_config": READ_CFG, "rows": []}
    return run_shapes(record, args, lambda name: bench_shape(name, ms, base, args.rounds,
                                                             args.reps), "h200_timer.json")


if __name__ == "__main__":
    sys.exit(main())
