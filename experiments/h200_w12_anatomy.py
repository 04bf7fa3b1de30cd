"""H200: where the W12 GEMV loses to the bf16 GEMV at M = 1 -- bytes, layout or decode.

Per Qwen3.8-27B decode shape, timed side by side with CUDA-graph replays over rotating copies:

- ``bf16``: the tuned bf16 Triton GEMV (best of its SWEEP GEMVs) on the bf16 weight;
- ``bf16_same_bytes``: the same kernel on a bf16 weight of ``[N, 3K/4]``, i.e. exactly the W12
  planes' bytes: what W12 would take at the bf16 GEMV's efficiency;
- ``w12``: the product W12 GEMM, best of its SWEEP GEMVs and swap-AB configs, with escapes;
- ``w12_noesc``: the same best config with the escape list emptied (timing only);
- ``bytes_rowmajor``: the W12 GEMV's loop and loads over the product planes with the decode and
  FMA replaced by an integer xor (what the planes' access pattern costs);
- ``bytes_blocked`` / ``w12_blocked``: the same, and the real decode, over a *blocked* copy of the
  planes in which each (BLOCK_N rows, BLOCK_K pairs) step's three tiles are one contiguous run of
  ``3 * BLOCK_N * BLOCK_K`` bytes (checked against ``w12_noesc``'s result).
- ``read``: a plain streaming read of the planes' bytes (the read ceiling at this size).

Writes ``$OUT/h200_w12_anatomy.json``. Run from the repo root: ``python3 experiments/h200_w12_anatomy.py``
"""

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

from specpilot.kernels.w12.triton import w12_decode_f32

OUT = Path(os.environ.get("OUT", "/tmp/out"))
SHAPES = {"q3_gate_up": (5120, 34816), "q3_down": (17408, 5120), "q3_gdn_in": (5120, 16480),
          "q3_gdn_out": (6144, 5120)}  # name: (K, N)
BLOCKED = [(8, 256, 4, 1), (8, 256, 4, 3), (16, 256, 4, 1), (8, 512, 4, 1), (16, 128, 4, 3),
           (4, 512, 2, 1)]  # BLOCK_N, BLOCK_K (pairs), num_warps, K_STAGES


@triton.jit
def bytes_rowmajor_kernel(sm_ptr, nib_ptr, out_ptr, N, K2, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, K_STAGES: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row = offs_n.to(tl.int64)[:, None]
    sm_rows = sm_ptr + row * (2 * K2)
    nib_rows = nib_ptr + row * K2
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.int32)
    for j0 in tl.range(0, K2, BLOCK_K, num_stages=K_STAGES):
        offs_j = j0 + tl.arange(0, BLOCK_K)[None, :]
        a = tl.load(sm_rows + offs_j, eviction_policy="evict_first")
        b = tl.load(sm_rows + K2 + offs_j, eviction_policy="evict_first")
        c = tl.load(nib_rows + offs_j, eviction_policy="evict_first")
        acc ^= (a ^ b ^ c).to(tl.int32)
    tl.store(out_ptr + offs_n, tl.sum(acc, axis=1).to(tl.float32))


@triton.jit
def blocked_kernel(x_ptr, blk_ptr, out_ptr, N, K, K2, scale, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, K_STAGES: tl.constexpr, DECODE: tl.constexpr,
                   ASM: tl.constexpr = True):
    """GEMV over the blocked planes: step s of row block rb is ``[nib | sm_a | sm_b]``, each
    ``[BLOCK_N, BLOCK_K]`` row-major, contiguous. DECODE 0: xor of the bytes only."""
    rb = tl.program_id(0)
    steps = K2 // BLOCK_K
    tile: tl.constexpr = BLOCK_N * BLOCK_K
    offs_n = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    inner = tl.arange(0, BLOCK_N)[:, None] * BLOCK_K + tl.arange(0, BLOCK_K)[None, :]
    base = blk_ptr + rb.to(tl.int64) * steps * 3 * tile
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    acc_i = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.int32)
    for s in tl.range(0, steps, num_stages=K_STAGES):
        p = base + s * 3 * tile + inner
        nib = tl.load(p, eviction_policy="evict_first")
        sm_a = tl.load(p + tile, eviction_policy="evict_first")
        sm_b = tl.load(p + 2 * tile, eviction_policy="evict_first")
        if DECODE:
            offs_j = s * BLOCK_K + tl.arange(0, BLOCK_K)
            x_a = tl.load(x_ptr + offs_j, eviction_policy="evict_last").to(tl.float32)
            x_b = tl.load(x_ptr + K2 + offs_j, eviction_policy="evict_last").to(tl.float32)
            acc += w12_decode_f32(sm_a, nib, False, ASM) * x_a[None, :]
            acc += w12_decode_f32(sm_b, nib, True, ASM) * x_b[None, :]
        else:
            acc_i ^= (nib ^ sm_a ^ sm_b).to(tl.int32)
    if DECODE:
        y = tl.sum(acc, axis=1) * scale
    else:
        y = tl.sum(acc_i, axis=1).to(tl.float32)
    tl.store(out_ptr + offs_n, y.to(out_ptr.dtype.element_ty))


@triton.jit
def rowmajor_kernel(x_ptr, sm_ptr, nib_ptr, out_ptr, N, K, K2, scale, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, K_STAGES: tl.constexpr, ASM: tl.constexpr = True):
    """:func:`blocked_kernel`'s loop over the product's row-major planes: no masks, no escapes,
    K2 a multiple of BLOCK_K (tells layout from kernel code)."""
    rb = tl.program_id(0)
    offs_n = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    row = offs_n.to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_K)[None, :]
    sm_p = sm_ptr + row * (2 * K2) + cols
    nib_p = nib_ptr + row * K2 + cols
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for s in tl.range(0, K2 // BLOCK_K, num_stages=K_STAGES):
        j0 = s * BLOCK_K
        nib = tl.load(nib_p + j0, eviction_policy="evict_first")
        sm_a = tl.load(sm_p + j0, eviction_policy="evict_first")
        sm_b = tl.load(sm_p + K2 + j0, eviction_policy="evict_first")
        offs_j = j0 + tl.arange(0, BLOCK_K)
        x_a = tl.load(x_ptr + offs_j, eviction_policy="evict_last").to(tl.float32)
        x_b = tl.load(x_ptr + K2 + offs_j, eviction_policy="evict_last").to(tl.float32)
        acc += w12_decode_f32(sm_a, nib, False, ASM) * x_a[None, :]
        acc += w12_decode_f32(sm_b, nib, True, ASM) * x_b[None, :]
    y = tl.sum(acc, axis=1) * scale
    tl.store(out_ptr + offs_n, y.to(out_ptr.dtype.element_ty))


@triton.jit
def read_kernel(src_ptr, out_ptr, n_vec, PER_PROG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * PER_PROG + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in tl.range(0, PER_PROG, BLOCK):
        acc ^= tl.load(src_ptr + offs + i, mask=offs + i < n_vec, other=0,
                       eviction_policy="evict_first")
    tl.store(out_ptr + pid, tl.max(acc, axis=0))


def blocked_copy(packed, block_n: int, block_k: int) -> torch.Tensor:
    n, k2 = packed.shape[0], packed.k_half
    sm, nib = packed.row_major()  # the layout before the blocked planes
    planes = torch.stack([nib, sm[:, :k2], sm[:, k2:]])  # [3, N, K2]
    s = k2 // block_k
    return (planes.view(3, n // block_n, block_n, s, block_k).permute(1, 3, 0, 2, 4)
            .contiguous().view(-1))


def layout_rows(row, x, packed, ncop, n, k, k2, timed, dev) -> None:
    """The same unmasked, escape-free decode loop over row-major and blocked planes, and the
    product GEMV (with and without escapes) at the same tile shapes."""
    from specpilot.kernels.w12.triton import window_scale
    from specpilot.kernels.w12_gemm.triton import w12_gemm

    copies = [packed] + [packed.clone() for _ in range(ncop - 1)]
    empty = packed.esc_col[:0]
    noesc = [dataclasses.replace(p, row_ptr=torch.zeros_like(p.row_ptr), esc_col=empty,
                                 esc_bits=p.esc_bits[:0], esc_delta=p.esc_delta[:0])
             for p in copies]
    scale = window_scale(packed.base)
    planes_rm = [p.row_major() for p in copies]
    y = torch.empty((1, n), device=dev, dtype=torch.bfloat16)
    for bn, bk, nw, ks in ((4, 512, 2, 1), (4, 512, 2, 3), (8, 256, 4, 1), (8, 512, 4, 1)):
        tag = f"{bn}x{bk}w{nw}s{ks}"
        row[f"rowmajor_{tag}_us"] = timed([lambda p=p: rowmajor_kernel[(n // bn,)](
            x, *p, y, n, k, k2, scale, BLOCK_N=bn, BLOCK_K=bk, K_STAGES=ks,
            num_warps=nw) for p in planes_rm])
        blk = [blocked_copy(p, bn, bk) for p in copies]
        row[f"blocked_{tag}_us"] = timed([lambda b=b: blocked_kernel[(n // bn,)](
            x, b, y, n, k, k2, scale, BLOCK_N=bn, BLOCK_K=bk, K_STAGES=ks, DECODE=1,
            num_warps=nw) for b in blk])
        del blk
        cfg = {"kernel": "gemv", "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1, "num_warps": nw,
               "num_stages": 3, "DECODE": "prmt", "ESC_CHUNK": 4, "K_STAGES": ks,
               "ESC_EARLY": 1, "L2_PREFETCH": 0}
        for name, planes in (("product", copies), ("product_noesc", noesc)):
            for early in (0, 1):
                c = {**cfg, "ESC_EARLY": early, "ESC_CHUNK": 4 if early else 1}
                row[f"{name}_early{early}_{tag}_us"] = timed(
                    [lambda p=p, c=c: w12_gemm(x, p, config=c) for p in planes])


def main(argv=None) -> None:
    from specpilot.fingerprint import current
    from specpilot.kernels import w12
    from specpilot.kernels.common.bench import num_copies_for
    from specpilot.kernels.common.bench import time_calls
    from specpilot.kernels.common.check import check_close
    from specpilot.kernels.common.check import gemm_exact
    from specpilot.kernels.skinny_gemm import space as bf16_space
    from specpilot.kernels.skinny_gemm.triton import skinny_gemm
    from specpilot.kernels.w12.triton import window_scale
    from specpilot.kernels.w12_gemm import space as w12_space
    from specpilot.kernels.w12_gemm.triton import w12_gemm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--layout-only", action="store_true",
                        help="only the W12 GEMV over row-major vs blocked planes, same loop")
    args = parser.parse_args(argv)
    dev = torch.device("cuda")
    result = {"fingerprint": current("cuda").to_dict(), "rows": []}
    t0 = time.time()

    def timed(calls):
        return time_calls(calls, dev, reps=args.reps).p50_us

    for name in args.shapes.split(","):
        k, n = SHAPES[name]
        k2 = k // 2
        gen = torch.Generator(device=dev).manual_seed(0)
        w = (torch.randn((n, k), generator=gen, device=dev) * 0.02).to(torch.bfloat16)
        x = torch.randn((1, k), device=dev).to(torch.bfloat16)
        packed = w12.pack(w)
        ncop = num_copies_for(packed.nbytes)
        row = {"shape": name, "K": k, "N": n, "w12_bytes": packed.nbytes, "copies": ncop}
        floor_us = packed.nbytes / 4.58e6
        row["w12_floor_us"] = floor_us

        if args.layout_only:
            layout_rows(row, x, packed, ncop, n, k, k2, timed, dev)
            print(json.dumps({kk: (round(vv, 2) if isinstance(vv, float) else vv)
                              for kk, vv in row.items()}), flush=True)
            result["rows"].append(row)
            continue
        # bf16 Triton GEMV: best GEMV of the SWEEP, on the weight and on a same-bytes weight.
        ws = [w] + [w.clone() for _ in range(num_copies_for(w.numel() * 2) - 1)]
        k_same = 3 * k // 4
        same = [t[:, :k_same].contiguous() for t in ws[:1]]
        same += [same[0].clone() for _ in range(num_copies_for(same[0].numel() * 2) - 1)]
        x_same = x[:, :k_same].contiguous()
        best_bf16, best_cfg = None, None
        for cfg in bf16_space.SWEEP:
            if cfg["kernel"] != "gemv":
                continue
            t = timed([lambda t=t, c=cfg: skinny_gemm(x, t, config=c) for t in ws])
            if best_bf16 is None or t < best_bf16:
                best_bf16, best_cfg = t, cfg
        row["bf16_us"], row["bf16_config"] = best_bf16, best_cfg
        row["bf16_same_bytes_us"] = timed(
            [lambda t=t: skinny_gemm(x_same, t, config=best_cfg) for t in same])
        del ws, same

        # Product W12: best of its SWEEP (GEMV and swap-AB), then without escapes.
        exact, abs_sum = gemm_exact(x, w)
        copies = [packed] + [packed.clone() for _ in range(ncop - 1)]
        best_w12, w12_cfg = None, None
        for cfg in w12_space.SWEEP:
            if cfg["kernel"].endswith("_sk"):
                continue
            try:
                w12_space.validate(cfg, 1, n, k)
            except ValueError:
                continue
            if not check_close("w12", w12_gemm(x, packed, config=cfg), exact, abs_sum).ok:
                continue
            t = timed([lambda p=p, c=cfg: w12_gemm(x, p, config=c) for p in copies])
            if best_w12 is None or t < best_w12:
                best_w12, w12_cfg = t, cfg
        row["w12_us"], row["w12_config"] = best_w12, w12_cfg
        empty = packed.esc_col[:0]
        noesc = [dataclasses.replace(p, row_ptr=torch.zeros_like(p.row_ptr), esc_col=empty,
                                     esc_bits=p.esc_bits[:0], esc_delta=p.esc_delta[:0])
                 for p in copies]
        row["w12_noesc_us"] = timed([lambda p=p: w12_gemm(x, p, config=w12_cfg) for p in noesc])
        ref_noesc = w12_gemm(x, noesc[0], config=w12_cfg).float()

        out = torch.empty(n, device=dev, dtype=torch.float32)
        planes_rm = [p.row_major() for p in copies]
        for bn, bk, nw, ks in ((8, 256, 4, 1), (8, 256, 4, 3), (16, 256, 4, 1)):
            row[f"bytes_rowmajor_{bn}x{bk}w{nw}s{ks}_us"] = timed(
                [lambda p=p, a=(bn, bk, nw, ks): bytes_rowmajor_kernel[(n // a[0],)](
                    *p, out, n, k2, BLOCK_N=a[0], BLOCK_K=a[1], K_STAGES=a[3],
                    num_warps=a[2]) for p in planes_rm])

        scale = window_scale(packed.base)
        for bn, bk, nw, ks in BLOCKED:
            if k2 % bk or n % bn:
                continue
            blk = [blocked_copy(p, bn, bk) for p in copies]
            tag = f"{bn}x{bk}w{nw}s{ks}"
            y = torch.empty((1, n), device=dev, dtype=torch.bfloat16)
            for decode in (0, 1):
                def launch(b, dec=decode, yy=y):
                    blocked_kernel[(n // bn,)](x, b, yy, n, k, k2, scale, BLOCK_N=bn,
                                               BLOCK_K=bk, K_STAGES=ks, DECODE=dec, num_warps=nw)
                if decode:
                    launch(blk[0])
                    err = (y.float() - ref_noesc).abs().max().item()
                    row[f"w12_blocked_{tag}_maxdiff"] = err
                row[f"{'w12' if decode else 'bytes'}_blocked_{tag}_us"] = timed(
                    [lambda b=b: launch(b) for b in blk])
            del blk

        flat = packed.planes.view(-1)
        vec = flat[: flat.numel() // 4 * 4].view(torch.int32)
        flats = [vec] + [vec.clone() for _ in range(ncop - 1)]
        red = torch.empty(1 << 20, device=dev, dtype=torch.int32)
        per = 16384
        row["read_us"] = timed([lambda v=v: read_kernel[(triton.cdiv(v.numel(), per),)](
            v, red, v.numel(), PER_PROG=per, BLOCK=1024, num_warps=4) for v in flats])
        del flats, copies, noesc, planes_rm
        torch.cuda.empty_cache()
        print(json.dumps({kk: (round(vv, 2) if isinstance(vv, float) else vv)
                          for kk, vv in row.items()}), flush=True)
        result["rows"].append(row)
    result["elapsed_s"] = time.time() - t0
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "h200_w12_anatomy.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
