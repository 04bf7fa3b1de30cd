"""H200: how fast a plain streaming read of each decode shape's weight bytes can be, side by side
with the product's best bf16 and W12 GEMMs -- which of issue 3's per-row targets a kernel that only
reads its bytes could meet at all.

The 4.58 TB/s read ceiling was measured on a large buffer (REFERENCE-kernels.md §3.1). A decode
projection is 47-400 MB, so every kernel that streams it also pays a fixed cost per call (launch,
ramp-up, the last programs' tail: a fit over the shapes gives about 5 us for the tuned bf16 GEMMs,
results/h200-2026-12-02-kernels-tma-final.json; 0.3-2 us of it was the timer's own, the host's
graph launch inside the timed interval, queued away since 0eefdc4,
results/h200-2026-12-02-timer.json). Here the same timer (CUDA-graph replays over rotating
copies, the GEMMs' method) times a read-only Triton kernel over exactly the bf16 bytes
(2 N K) and the W12 bytes (the packed planes and escape lists) of each shape: the best of a few
grid configs, each program reading a contiguous chunk in 16-byte vectors and xor-folding it into
one word it stores, so no byte is skipped. Then, in ``--rounds`` interleaved rounds: both reads,
and at each M the bf16 and rows-order W12 (``w12_gemm``) winners of ``--baseline`` (a
kernels_h200.py record), each checked against the fp64 result first.

Per row the record derives:
- ``read_frac_bf16``: the ceiling's time for the bf16 bytes over the read's time, i.e. the highest
  fraction of 4.58 TB/s that reading them reached at this size (the ">= 90%" target's bound);
- ``read_w12_over_bf16``: the W12 bytes' read time over the best bf16 GEMM's (the "W12 <= 0.80x"
  target's bound: above 0.80, even a kernel that only reads the W12 bytes misses it);
- ``w12_over_read``: the W12 GEMM over the read of its bytes (what decode and MMA cost on top).

    python3 experiments/h200_read_floor.py --baseline experiments/results/X.json [--m 4,16]
"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import kernels_h200 as kb  # noqa: E402  (shapes)
from h200_w12_frag import baseline_configs  # noqa: E402
from h200_w12_frag import run_shapes  # noqa: E402
from h200_w12_frag import side_by_side_args  # noqa: E402
from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels import w12  # noqa: E402
from specpilot.kernels.common.bench import num_copies_for  # noqa: E402
from specpilot.kernels.common.bench import time_calls  # noqa: E402
from specpilot.kernels.common.check import check_close  # noqa: E402
from specpilot.kernels.common.check import gemm_exact  # noqa: E402
from specpilot.kernels.common.roofline import CEILINGS  # noqa: E402
from specpilot.kernels.skinny_gemm.triton import skinny_gemm  # noqa: E402
from specpilot.kernels.tuning.ops import synthetic_weight  # noqa: E402
from specpilot.kernels.w12_gemm.triton import w12_gemm  # noqa: E402

READ_TB_S = CEILINGS["NVIDIA H200"].read_tb_s
# (bytes per program, words per step, warps, stages): programs of 16 KB to 1 MB
READ_CONFIGS = [(16384, 1024, 4, 1), (65536, 1024, 4, 3), (65536, 2048, 8, 3),
                (262144, 2048, 8, 3), (262144, 1024, 4, 4), (1048576, 2048, 8, 4)]


@triton.jit
def read_kernel(src_ptr, out_ptr, n_words, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program p reads int32 words ``[p * CHUNK, (p + 1) * CHUNK)`` (masked past ``n_words``)
    and stores their xor, so every word is loaded and nothing else is."""
    xor_chunk(src_ptr, out_ptr, n_words, CHUNK, BLOCK)


@triton.jit
def xor_chunk(src_ptr, out_ptr, n_words, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """:func:`read_kernel`'s body (also ``h200_timer``'s PDL read)."""
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * CHUNK
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for off in range(0, CHUNK, BLOCK):
        idx = start + off + tl.arange(0, BLOCK)
        acc ^= tl.load(src_ptr + idx, mask=idx < n_words, other=0, eviction_policy="evict_first")
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))


def read_call(buf: torch.Tensor, out: torch.Tensor, cfg: tuple) -> torch.Tensor:
    chunk_bytes, block, warps, stages = cfg
    words = buf.numel()
    read_kernel[(triton.cdiv(words, chunk_bytes // 4),)](
        buf, out, words, CHUNK=chunk_bytes // 4, BLOCK=block, num_warps=warps, num_stages=stages)
    return out


def read_fns(nbytes: int, dev: torch.device) -> dict:
    """``config label -> calls`` reading ``nbytes`` (rounded up to words) from rotating copies."""
    words = -(-nbytes // 4)
    bufs = [torch.randint(-2**31, 2**31 - 1, (words,), dtype=torch.int32, device=dev)
            for _ in range(num_copies_for(nbytes))]
    out = torch.empty(words // 4096 + 1, dtype=torch.int32, device=dev)
    return {"x".join(map(str, c)): [lambda b=b, c=c: read_call(b, out, c) for b in bufs]
            for c in READ_CONFIGS}


def best_read(fns: dict, dev: torch.device, reps: int) -> tuple[str, list]:
    times = {lbl: time_calls(calls, dev, reps=reps).p50_us for lbl, calls in fns.items()}
    best = min(times, key=times.get)
    return best, fns[best], times


def bench_shape(name: str, ms: list[int], base: dict, rounds: int, reps: int) -> dict:
    k, n = kb.SHAPES[name]
    dev = torch.device("cuda")
    w = synthetic_weight(n, k, dev, 0, outlier_rate=2e-4)
    packed = w12.pack(w)
    bytes_bf16, bytes_w12 = 2 * n * k, packed.nbytes
    row = {"shape": name, "K": k, "N": n, "bytes_bf16": bytes_bf16, "bytes_w12": bytes_w12,
           "floor_bf16_us": bytes_bf16 / READ_TB_S / 1e6,
           "floor_w12_us": bytes_w12 / READ_TB_S / 1e6}
    reads = {}
    for label, nbytes in (("read_bf16", bytes_bf16), ("read_w12", bytes_w12)):
        cfg, calls, sweep = best_read(read_fns(nbytes, dev), dev, reps)
        row[f"{label}_config"], row[f"{label}_sweep_us"], reads[label] = cfg, sweep, calls
    x_all = torch.randn((max(ms), k), device=dev).to(torch.bfloat16)
    exact_all, abs_all = gemm_exact(x_all, w)
    bf16_copies = [w] + [w.clone() for _ in range(num_copies_for(bytes_bf16) - 1)]
    w12_copies = [packed] + [packed.clone() for _ in range(num_copies_for(bytes_w12) - 1)]
    calls, row["checks"], row["configs"] = dict(reads), {}, {}
    for m in ms:
        x = x_all[:m].contiguous()
        bf16_cfg, w12_cfg = base[(name, m)]
        row["configs"][m] = {"bf16": bf16_cfg, "w12": w12_cfg}
        for label, fn, copies, cfg in (("bf16", skinny_gemm, bf16_copies, bf16_cfg),
                                       ("w12", w12_gemm, w12_copies, w12_cfg)):
            res = check_close(f"{label} M={m}", fn(x, copies[0], config=cfg), exact_all[:m],
                              abs_all[:m])
            row["checks"][f"{label}_m{m}"] = {"ok": res.ok, "detail": str(res)}
            if res.ok:
                calls[f"{label}_m{m}"] = [lambda x=x, c=c, f=fn, g=cfg: f(x, c, config=g)
                                          for c in copies]
    row["rounds_us"] = {lbl: [] for lbl in calls}
    for _ in range(rounds):
        for lbl, fns in calls.items():
            row["rounds_us"][lbl].append(time_calls(fns, dev, reps=reps).p50_us)
    med = {lbl: statistics.median(v) for lbl, v in row["rounds_us"].items()}
    row["median_us"] = med
    row["read_frac_bf16"] = row["floor_bf16_us"] / med["read_bf16"]
    row["read_frac_w12"] = row["floor_w12_us"] / med["read_w12"]
    row["per_m"] = {}
    for m in ms:
        if f"bf16_m{m}" not in med or f"w12_m{m}" not in med:
            continue
        bf16, w12_us = med[f"bf16_m{m}"], med[f"w12_m{m}"]
        row["per_m"][m] = {"bf16_frac": row["floor_bf16_us"] / bf16,
                           "bf16_over_read": bf16 / med["read_bf16"],
                           "w12_over_bf16": w12_us / bf16,
                           "read_w12_over_bf16": med["read_w12"] / bf16,
                           "w12_over_read": w12_us / med["read_w12"]}
        p = row["per_m"][m]
        print(f"{name:13} M={m:2} read bf16 {med['read_bf16']:6.1f} ({row['read_frac_bf16']:.3f})"
              f" w12 {med['read_w12']:6.1f} | bf16 {bf16:6.1f} ({p['bf16_frac']:.3f}) w12 "
              f"{w12_us:6.1f} ({p['w12_over_bf16']:.3f}; read bound {p['read_w12_over_bf16']:.3f};"
              f" over read {p['w12_over_read']:.3f})", flush=True)
    return row


def main() -> int:
    args = side_by_side_args(__doc__, ",".join(kb.SHAPES), "4,16").parse_args()
    base = baseline_configs(args.baseline)
    ms = [int(a) for a in args.m.split(",")]
    record = {"fingerprint": current("cuda").to_dict(), "command": " ".join(sys.argv),
              "read_tb_s": READ_TB_S, "read_configs": READ_CONFIGS, "rows": []}
    return run_shapes(record, args, lambda name: [bench_shape(name, ms, base, args.rounds,
                                                              args.reps)],
                      "h200_read_floor.json")


if __name__ == "__main__":
    sys.exit(main())
