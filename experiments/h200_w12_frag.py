"""H200: a fragment-order W12 layout for the swap-AB GEMM, against the product's W12 and bf16
kernels at the same shapes and M, side by side.

The product's swap-AB W12 kernel (``w12_gemm_fwd_kernel_dot``) loads row-major byte tiles, which
Triton copies to shared memory and reads back into the ``mma.sync`` A-operand layout with 4-byte
``LDS`` (35 per K step of 32 x 128 pairs, 16 tokens, on the sm_90 cubin). Here the three planes are
stored per ``[16 * W rows, 32 * FC pairs]`` tile in the order the A operand's registers take them
(``frag_pack``): each thread's 16 bytes of a chunk are contiguous, so a K step is ``3 * FC``
coalesced 16-byte ``cp.async`` copies per thread and as many ``LDS.128`` reads, and the
``reshape -> permute -> reshape`` in ``frag_to_a`` maps the loaded tile onto the A-operand layout
(Triton's ``dot_op`` with ``kWidth = 4``) with no layout conversion (checked on the TTGIR by
``tests/kernels/test_w12_frag.py``). The decode is the product's (``w12_decode_scaled``).

``frag_kernel_tma`` copies the same tiles, and the x tiles, with the Tensor Memory Accelerator
(variants ending in ``t``: 1.3-2.2x slower on the H200, results/h200-2026-12-02-w12-frag-tma.json;
on the sm_90a cubin its K loop is about 4.3 SASS per weight against 2.4). With one stage (``x1``)
Triton does not pipeline the loads: the planes go from global memory straight to registers, which
won (...-w12-frag-one-stage*.json). ``kS`` splits K S ways; ``frag_gemv_kernel`` (``g``) is an
M = 1 GEMV on the same tiles (...-w12-frag-split-gemv.json). The one-stage kernels, split K and
the GEMV now live in the product as ``kernels/w12f_gemm`` (planes in fragment order in the
``W12Tensor`` itself); this script keeps the per-variant tile packing for exploration.

For every shape and M: the product's W12 and bf16 winners of ``--baseline`` (a kernels_h200.py
record) and each fragment variant ``W x FC x BLOCK_T x stages[v2][t]`` are checked against the fp64
result, then timed in ``--rounds`` interleaved rounds (CUDA-graph replays over rotating weight
copies, median of 15 each); the record holds every round and their median.

    python3 experiments/h200_w12_frag.py --baseline experiments/results/X.json \\
        [--shapes q3_gate_up,..] [--m 4,8,16] [--variants 2x8x8x2,2x4x16x3,4x4x16x2v2]
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import kernels_h200 as kb  # noqa: E402  (shapes)
from specpilot.fingerprint import current  # noqa: E402
from specpilot.kernels import w12  # noqa: E402
from specpilot.kernels.common.bench import num_copies_for  # noqa: E402
from specpilot.kernels.common.bench import time_calls  # noqa: E402
from specpilot.kernels.common.check import check_close  # noqa: E402
from specpilot.kernels.common.check import gemm_exact  # noqa: E402
from specpilot.kernels.common.epilogue import store_splitk  # noqa: E402
from specpilot.kernels.common.interpret import dot_acc  # noqa: E402
from specpilot.kernels.common.mma import mma_v2_compile  # noqa: E402
from specpilot.kernels.skinny_gemm.triton import skinny_gemm  # noqa: E402
from specpilot.kernels.tuning.ops import synthetic_weight  # noqa: E402
from specpilot.kernels.w12.format import unblock_planes  # noqa: E402
from specpilot.kernels.w12.triton import w12_decode_scaled  # noqa: E402
from specpilot.kernels.w12.triton import window_scale  # noqa: E402
from specpilot.kernels.w12_gemm.triton import apply_escapes  # noqa: E402
from specpilot.kernels.w12_gemm.triton import escape_rows  # noqa: E402
from specpilot.kernels.w12_gemm.triton import w12_gemm  # noqa: E402
from specpilot.kernels.w12f_gemm.triton import frag_to_a  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))


@triton.jit
def frag_mac(acc, nib, sm_a, sm_b, xa, xb, FC: tl.constexpr, W: tl.constexpr,
             ASM: tl.constexpr):
    """One K step on loaded plane tiles (flat, stored order) and x^T tiles: both halves."""
    acc = dot_acc(frag_to_a(w12_decode_scaled(sm_a, nib, False, ASM), FC, W), xa, acc, False)
    return dot_acc(frag_to_a(w12_decode_scaled(sm_b, nib, True, ASM), FC, W), xb, acc, False)


@triton.jit
def frag_store(acc, scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
               offs_t, offs_n, M, N, ESC_CHUNK: tl.constexpr, ws_ptr=None, lock_ptr=None,
               tile_id=0, pid_k=0, SPLIT_K: tl.constexpr = 1):
    """The product kernel's epilogue: scale, the rows' escapes (split 0 only), store (split K:
    the deterministic last-arriver sum of :func:`store_splitk`)."""
    out_t = tl.trans(acc) * scale
    start, count = escape_rows(row_ptr, offs_n, (offs_n < N) & (pid_k == 0))
    out_t = apply_escapes(out_t, x_ptr, stride_xm, offs_t, M, start, count, 0, esc_col_ptr,
                          esc_delta_ptr, ESC_CHUNK)
    if SPLIT_K == 1:
        store_splitk(out_t, out_ptr, out_ptr, out_ptr, offs_t, offs_n, M, N, 0, 0, 1)
    else:
        store_splitk(out_t, out_ptr, ws_ptr, lock_ptr, offs_t, offs_n, M, N, tile_id, pid_k,
                     SPLIT_K)


@triton.jit(do_not_specialize=["M"])
def frag_kernel(x_ptr, tiles_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, ws_ptr, lock_ptr,
                M, N, K, K2, stride_xm, scale, KT, KT_PER, W: tl.constexpr, FC: tl.constexpr,
                BLOCK_T: tl.constexpr, ESC_CHUNK: tl.constexpr, ASM: tl.constexpr,
                SPLIT_K: tl.constexpr, MMA_V2: tl.constexpr = False):
    """Grid (M / BLOCK_T, N / (16 W), SPLIT_K); the product's swap-AB step on fragment-order
    tiles, split ``pid_k`` taking K steps ``[pid_k * KT_PER, (pid_k + 1) * KT_PER)``.
    ``MMA_V2`` only keys Triton's cache (:mod:`specpilot.kernels.common.mma`)."""
    BLOCK_N: tl.constexpr = 16 * W
    BLOCK_K: tl.constexpr = 32 * FC
    TILE: tl.constexpr = BLOCK_N * BLOCK_K
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_mask = offs_t < M
    x_cols = x_ptr + offs_t[None, :] * stride_xm
    # one flat run per plane tile, so the copies are 16 bytes per lane in address order
    row_tiles = tiles_ptr + pid_n.to(tl.int64) * KT * (3 * TILE) + tl.arange(0, TILE)
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    for s in range(pid_k * KT_PER, tl.minimum(KT, (pid_k + 1) * KT_PER)):
        p = row_tiles + s * (3 * TILE)
        nib = tl.load(p, eviction_policy="evict_first")
        sm_a = tl.load(p + TILE, eviction_policy="evict_first")
        sm_b = tl.load(p + 2 * TILE, eviction_policy="evict_first")
        offs_j = s * BLOCK_K + tl.arange(0, BLOCK_K)
        xa = tl.load(x_cols + offs_j[:, None], mask=(offs_j < K2)[:, None] & t_mask[None, :],
                     other=0.0)
        xb = tl.load(x_cols + K2 + offs_j[:, None],
                     mask=(K2 + offs_j < K)[:, None] & t_mask[None, :], other=0.0)
        acc = frag_mac(acc, nib, sm_a, sm_b, xa, xb, FC, W, ASM)
    frag_store(acc, scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
               offs_t, offs_n, M, N, ESC_CHUNK, ws_ptr, lock_ptr,
               pid_t * tl.num_programs(1) + pid_n, pid_k, SPLIT_K)


@triton.jit(do_not_specialize=["M"])
def frag_gemv_kernel(x_ptr, tiles_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, ws_ptr,
                     lock_ptr, M, N, K, K2, stride_xm, scale, KT, KT_PER, W: tl.constexpr,
                     FC: tl.constexpr, BLOCK_T: tl.constexpr, ESC_CHUNK: tl.constexpr,
                     ASM: tl.constexpr, SPLIT_K: tl.constexpr):
    """M == 1 on the same tiles, no MMA: grid (1, N / (16 W), SPLIT_K). Each thread multiplies
    its 16 bytes of a chunk by the x values of their columns and sums what it holds of one row
    (column bits c, e3, e1 e0: registers), so a step leaves two partial sums per thread; the four
    lanes of a row (bits t) are summed once, after the K loop."""
    BLOCK_N: tl.constexpr = 16 * W
    BLOCK_K: tl.constexpr = 32 * FC
    TILE: tl.constexpr = BLOCK_N * BLOCK_K
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_tiles = tiles_ptr + pid_n.to(tl.int64) * KT * (3 * TILE) + tl.arange(0, TILE)
    # the pair column of each held byte: 32 c + 16 e3 + 4 t + (e1 e0), shaped as the tile
    cols = (tl.arange(0, FC)[:, None, None, None, None, None, None] * 32
            + tl.arange(0, 4)[None, None, None, :, None, None, None] * 4
            + tl.arange(0, 2)[None, None, None, None, :, None, None] * 16
            + tl.arange(0, 4)[None, None, None, None, None, None, :])
    acc = tl.zeros([W, 8, 4, 2], dtype=tl.float32)  # w, g, t, e2
    for s in range(pid_k * KT_PER, tl.minimum(KT, (pid_k + 1) * KT_PER)):
        p = row_tiles + s * (3 * TILE)
        nib = tl.load(p, eviction_policy="evict_first")
        j = s * BLOCK_K + cols
        xa = tl.load(x_ptr + j, mask=j < K2, other=0.0).to(tl.float32)
        xb = tl.load(x_ptr + K2 + j, mask=K2 + j < K, other=0.0).to(tl.float32)
        for half in tl.static_range(2):
            sm = tl.load(p + (1 + half) * TILE, eviction_policy="evict_first")
            w = w12_decode_scaled(sm, nib, half == 1, ASM).to(tl.float32)
            w = tl.reshape(w, [FC, W, 8, 4, 2, 2, 4])  # c, w, g, t, e3, e2, e1 e0
            prod = w * (xb if half == 1 else xa)
            acc += tl.sum(tl.sum(tl.sum(prod, axis=6), axis=4), axis=0)
    y = tl.reshape(tl.permute(tl.sum(acc, axis=2), [0, 2, 1]), [BLOCK_N])  # rows (w, e2, g)
    frag_store(y[:, None], scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr,
               out_ptr, tl.arange(0, 1), offs_n, M, N, ESC_CHUNK, ws_ptr, lock_ptr, pid_n,
               pid_k, SPLIT_K)


@triton.jit(do_not_specialize=["M"])
def frag_kernel_tma(x_desc, tiles_desc, x_ptr, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr, M, N,
                    K, K2, stride_xm, scale, KT, W: tl.constexpr, FC: tl.constexpr,
                    BLOCK_T: tl.constexpr, ESC_CHUNK: tl.constexpr, ASM: tl.constexpr,
                    ROW: tl.constexpr, MMA_V2: tl.constexpr = False):
    """:func:`frag_kernel` with the plane tiles and x tiles copied by the Tensor Memory
    Accelerator. ``tiles_desc`` views the tiles as rows of ``ROW`` bytes (a plane tile is
    ``TILE / ROW`` of them: at most 256); ``x_desc`` covers ``x [M, K]`` in ``[BLOCK_T,
    BLOCK_K]`` boxes, zero past M and K; the launcher requires K2 to be whole K steps, so a
    low-half box never reaches the high half's columns."""
    BLOCK_N: tl.constexpr = 16 * W
    BLOCK_K: tl.constexpr = 32 * FC
    TILE: tl.constexpr = BLOCK_N * BLOCK_K
    ROWS: tl.constexpr = TILE // ROW
    pid_t = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    acc = tl.zeros([BLOCK_N, BLOCK_T], dtype=tl.float32)
    for s in range(0, KT):
        row = (pid_n * KT + s) * (3 * ROWS)
        nib = tl.reshape(tiles_desc.load([row, 0]), [TILE])
        sm_a = tl.reshape(tiles_desc.load([row + ROWS, 0]), [TILE])
        sm_b = tl.reshape(tiles_desc.load([row + 2 * ROWS, 0]), [TILE])
        xa = tl.trans(x_desc.load([pid_t * BLOCK_T, s * BLOCK_K]))
        xb = tl.trans(x_desc.load([pid_t * BLOCK_T, K2 + s * BLOCK_K]))
        acc = frag_mac(acc, nib, sm_a, sm_b, xa, xb, FC, W, ASM)
    frag_store(acc, scale, x_ptr, stride_xm, row_ptr, esc_col_ptr, esc_delta_ptr, out_ptr,
               offs_t, offs_n, M, N, ESC_CHUNK)


def frag_pack(packed, w_tiles: int, fc: int) -> torch.Tensor:
    """The packed tensor's planes as ``[N / BN, K2 / BK, 3, BN * BK]`` fragment-order tiles
    (zero padded), BN = 16 W rows, BK = 32 FC pairs."""
    r, k2 = packed.rows, packed.k_half
    sm, nib = unblock_planes(packed.planes, r, k2)
    bn, bk = 16 * w_tiles, 32 * fc
    rt, kt = -(-r // bn), -(-k2 // bk)
    full = torch.zeros((3, rt * bn, kt * bk), dtype=torch.uint8, device=nib.device)
    full[0, :r, :k2] = nib
    full[1, :r, :k2] = sm[:, :k2]
    full[2, :r, :k2] = sm[:, k2:2 * k2]
    t = full.view(3, rt, w_tiles, 2, 8, kt, fc, 2, 4, 4)  # plane, rt, w, e2, g, kt, c, e3, t, e
    t = t.permute(1, 5, 0, 6, 2, 4, 8, 7, 3, 9)  # rt, kt, plane, c, w, g, t, e3, e2, e1 e0
    return t.contiguous().view(rt, kt, 3, bn * bk)


def parse_variant(text: str) -> dict:
    """``W x FC x BLOCK_T x stages``, then ``v2`` (mma.sync for 4+ warps), ``kS`` (S-way split
    K), and ``t`` (the TMA kernel) or ``g`` (the M = 1 GEMV), e.g. ``2x4x8x3``, ``1x8x8x1k4``,
    ``2x4x8x3t`` or ``1x8x8x1k2g``."""
    got = re.fullmatch(r"(\d+)x(\d+)x(\d+)x(\d+)(v2)?(?:k(\d+))?([tg])?", text)
    if got is None:
        raise ValueError(f"variant {text!r}: expected W x FC x BLOCK_T x stages[v2][kS][t|g]")
    w_tiles, fc, bt, stages = (int(a) for a in got.groups()[:4])
    return {"W": w_tiles, "FC": fc, "BLOCK_T": bt, "num_stages": stages,
            "MMA_V2": bool(got[5]), "SPLIT_K": int(got[6] or 1), "TMA": got[7] == "t",
            "GEMV": got[7] == "g"}


_SPLIT_BUFFERS = {}  # (device, M, N, tiles): the split-K workspace and its zeroed counters


def split_buffers(x, n: int, splits: int, tiles: int):
    key = (x.device, x.shape[0], n, tiles)
    if splits > 1 and key not in _SPLIT_BUFFERS:
        _SPLIT_BUFFERS[key] = (torch.empty((8, x.shape[0], n), dtype=torch.float32,
                                           device=x.device),
                               torch.zeros(tiles, dtype=torch.int32, device=x.device))
    return _SPLIT_BUFFERS.get(key, (x, x))


def frag_call(x, tiles, packed, v: dict):
    m, k = x.shape
    n, k2 = packed.shape[0], packed.k_half
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    kt, splits = tiles.shape[1], v.get("SPLIT_K", 1)
    if splits > 8 or (v.get("GEMV") and m != 1) or (v.get("TMA") and splits > 1):
        raise ValueError(f"variant {v}: at most 8 splits; the GEMV runs M = 1; TMA: no split")
    per = triton.cdiv(kt, splits)
    splits = triton.cdiv(kt, per)  # no empty split
    grid = (triton.cdiv(m, v["BLOCK_T"]), triton.cdiv(n, 16 * v["W"]), splits)
    meta = {"W": v["W"], "FC": v["FC"], "BLOCK_T": v["BLOCK_T"], "ESC_CHUNK": 1,
            "ASM": int(x.is_cuda), "num_warps": v["W"], "num_stages": v["num_stages"]}
    esc = (packed.row_ptr, packed.esc_col, packed.esc_delta, out)
    shape = (m, n, k, k2, x.stride(0), window_scale(packed.base), kt)
    with mma_v2_compile(v["MMA_V2"]):
        if not v.get("TMA"):
            ws, locks = split_buffers(x, n, splits, grid[0] * grid[1])
            if v.get("GEMV"):
                frag_gemv_kernel[grid](x, tiles, *esc, ws, locks, *shape, per, SPLIT_K=splits,
                                       **meta)
            else:
                frag_kernel[grid](x, tiles, *esc, ws, locks, *shape, per, SPLIT_K=splits,
                                  MMA_V2=v["MMA_V2"], **meta)
            return out
        tile = tiles.shape[-1]
        row = max(16, tile // 256)  # bytes per descriptor row: at most 256 rows per plane tile
        if k2 % (32 * v["FC"]) or (x.stride(0) * 2) % 16 or x.data_ptr() % 16:
            raise ValueError("the TMA variant needs K2 in whole K steps and 16-byte x rows")
        x_desc = TensorDescriptor(x, [m, k], [x.stride(0), 1], [v["BLOCK_T"], 32 * v["FC"]])
        t_desc = TensorDescriptor(tiles.view(-1, row), [tiles.numel() // row, row], [row, 1],
                                  [tile // row, row])
        frag_kernel_tma[grid](x_desc, t_desc, x, *esc, *shape, ROW=row, MMA_V2=v["MMA_V2"],
                              **meta)
    return out


def baseline_configs(path: str) -> dict:
    """``(shape, M) -> (bf16 config, W12 config)``: the winners of a kernels_h200.py record."""
    rows = json.loads(Path(path).read_text())["rows"]
    return {(r["shape"], r["M"]): (r["skinny_gemm"]["best"]["config"],
                                    r["w12_gemm"]["best"]["config"]) for r in rows
            if r["skinny_gemm"]["best"] and r["w12_gemm"]["best"]}


def bench_shape(name, ms, variants, base, rounds, reps):
    k, n = kb.SHAPES[name]
    dev = torch.device("cuda")
    w = synthetic_weight(n, k, dev, 0, outlier_rate=2e-4)
    packed = w12.pack(w)
    x_all = torch.randn((max(ms), k), device=dev).to(torch.bfloat16)
    exact_all, abs_all = gemm_exact(x_all, w)
    nb = num_copies_for(2 * n * k)
    nw = num_copies_for(packed.nbytes)
    bf16_copies = [w] + [w.clone() for _ in range(nb - 1)]
    w12_copies = [packed] + [packed.clone() for _ in range(nw - 1)]
    frag_copies = {}  # per (W, FC): the variants of one tile shape stream the same copies
    for v in variants.values():
        if (v["W"], v["FC"]) not in frag_copies:
            t = frag_pack(packed, v["W"], v["FC"])
            frag_copies[v["W"], v["FC"]] = [t] + [t.clone() for _ in range(nw - 1)]
    rows = []
    for m in ms:
        x = x_all[:m].contiguous()
        exact, abs_sum = exact_all[:m], abs_all[:m]
        bf16_cfg, w12_cfg = base[(name, m)]
        calls = {"bf16": [lambda c=c: skinny_gemm(x, c, config=bf16_cfg) for c in bf16_copies],
                 "w12": [lambda c=c: w12_gemm(x, c, config=w12_cfg) for c in w12_copies]}
        for label, v in variants.items():
            if (v["BLOCK_T"] < 16 and m > v["BLOCK_T"]) or (v["GEMV"] and m != 1):
                continue
            calls[label] = [lambda t=t, c=c, v=v: frag_call(x, t, c, v)
                            for t, c in zip(frag_copies[v["W"], v["FC"]], w12_copies)]
        row = {"shape": name, "K": k, "N": n, "M": m, "bf16_config": bf16_cfg,
               "w12_config": w12_cfg, "checks": {}, "rounds_us": {}}
        for label, fns in list(calls.items()):
            try:
                res = check_close(label, fns[0](), exact, abs_sum)
                ok, detail = res.ok, str(res)
            except Exception as err:  # noqa: BLE001  (a variant that fails is recorded)
                ok, detail = False, f"{type(err).__name__}: {err}"[:400]
            row["checks"][label] = {"ok": ok, "detail": detail}
            if not ok:
                del calls[label]
        for _ in range(rounds):
            for label, fns in calls.items():
                row["rounds_us"].setdefault(label, []).append(
                    time_calls(fns, dev, reps=reps).p50_us)
        row["median_us"] = {lbl: statistics.median(v) for lbl, v in row["rounds_us"].items()}
        bf16 = row["median_us"]["bf16"]
        row["over_bf16"] = {lbl: t / bf16 for lbl, t in row["median_us"].items()}
        rows.append(row)
        medians = " ".join(f"{lbl} {t:.1f}" for lbl, t in row["median_us"].items())
        print(f"  {medians}", flush=True)
        best = min((lbl for lbl in row["median_us"] if lbl not in ("bf16", "w12")),
                   key=row["median_us"].get, default=None)
        print(f"{name:13} M={m:2} bf16 {bf16:7.1f}  w12 {row['median_us']['w12']:7.1f} "
              f"({row['over_bf16']['w12']:.3f})  best frag {best} "
              f"{row['median_us'].get(best, float('nan')):7.1f} "
              f"({row['over_bf16'].get(best, float('nan')):.3f})", flush=True)
    return rows


def side_by_side_args(doc: str, shapes: str, ms: str) -> argparse.ArgumentParser:
    """The options of the scripts that time kernels beside a kernels_h200.py record's winners."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="kernels_h200.py record")
    parser.add_argument("--shapes", default=shapes)
    parser.add_argument("--m", default=ms)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--budget-s", type=float, default=240.0)
    return parser


def run_shapes(record: dict, args, bench, out_name: str) -> int:
    """``record["rows"] += bench(shape)`` for each of ``args.shapes`` until ``args.budget_s`` is
    spent, writing ``$OUT/out_name`` after every shape; 2 without a CUDA GPU."""
    if not torch.cuda.is_available():
        print(f"{out_name}: needs a CUDA GPU", file=sys.stderr)
        return 2
    start = time.time()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.shapes.split(","):
        if time.time() - start > args.budget_s:
            record["budget_exhausted"] = True
            break
        record["rows"] += bench(name)
        record["elapsed_s"] = time.time() - start
        (OUT / out_name).write_text(json.dumps(record, indent=1, default=str))
    return 0


def main() -> int:
    parser = side_by_side_args(__doc__, "q3_gate_up,q3_down,q3_gdn_out,q3_gdn_in,mg_down",
                               "4,8,16")
    parser.add_argument("--variants", default="2x4x8x1,2x2x8x1,1x8x8x1,2x4x8x1k4,2x4x16x1k4,"
                                              "4x4x16x1v2k2,4x4x8x1g,2x4x8x1k4g")
    args = parser.parse_args()
    variants = {lbl: parse_variant(lbl) for lbl in args.variants.split(",")}
    base = baseline_configs(args.baseline)
    ms = [int(a) for a in args.m.split(",")]
    record = {"fingerprint": current("cuda").to_dict(), "command": " ".join(sys.argv),
              "variants": variants, "rows": []}
    return run_shapes(record, args, lambda name: bench_shape(name, ms, variants, base,
                                                             args.rounds, args.reps),
                      "h200_w12_frag.json")


if __name__ == "__main__":
    sys.exit(main())
