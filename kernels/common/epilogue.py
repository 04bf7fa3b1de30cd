"""The split-K epilogue shared by the skinny GEMM kernels.

Split-K is *deterministic*: each split writes its fp32 partial tile to a workspace, bumps a
per-tile counter, and the split that arrives last sums the partials in split order 0..S-1 and
writes the output, then resets the counter to 0 (so the counter buffer is reusable and CUDA-graph
safe). No fp32 atomics, so the same inputs give the same bits on every run, whatever order the CTAs
finish in.
"""

import triton
import triton.language as tl


@triton.jit
def store_splitk(acc, out_ptr, ws_ptr, lock_ptr, offs_m, offs_n, M, N, tile_id, pid_k,
                 SPLIT_K: tl.constexpr):
    """Store ``acc [BM, BN]`` (fp32) at rows ``offs_m``, cols ``offs_n`` of ``out [M, N]``
    (contiguous).

    With ``SPLIT_K > 1``, ``ws_ptr`` is an fp32 ``[SPLIT_K, M, N]`` workspace and ``lock_ptr`` an
    int32 counter per output tile (all zero on entry, left zero on exit).
    """
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    idx = offs_m[:, None] * N + offs_n[None, :]
    if SPLIT_K == 1:
        tl.store(out_ptr + idx, acc.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptr + pid_k * M * N + idx, acc, mask=mask)
        # All threads' partial stores happen before the (release) counter bump.
        tl.debug_barrier()
        count = tl.atomic_add(lock_ptr + tile_id, 1, sem="acq_rel")
        if count == SPLIT_K - 1:
            total = tl.zeros_like(acc)
            for s in range(SPLIT_K):
                # .cg: read from L2, never a stale L1 line.
                total += tl.load(ws_ptr + s * M * N + idx, mask=mask, other=0.0,
                                 cache_modifier=".cg")
            tl.store(out_ptr + idx, total.to(out_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(lock_ptr + tile_id, 0)
