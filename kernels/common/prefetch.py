"""L2 prefetch hints for the decode GEMMs (compute capability 9.0+, GPU only).

A decode GEMM streams its weight once, and a kernel's first and last microseconds leave HBM
partly idle: its programs start, issue their first loads and wait about a memory latency; at its
end the last programs drain alone. :func:`prefetch_l2` asks the copy engine to bring a contiguous
range into L2 (``cp.async.bulk.prefetch.L2.global``): one instruction from one thread of the
program, no register or shared memory held, no completion to wait for. The GEMVs and the swap-AB
kernels with ``L2_PREFETCH > 0`` issue it, before their PDL wait (:mod:`.pdl`), for the weights of
the K steps after the first, so while the previous kernel finishes, HBM already streams this
kernel's weights into L2 and the K loop's loads then hit there. The same weights are loaded by the
K loop as before: a prefetch only moves bytes earlier, so the result is bit-identical with it on
or off. A hint, not a copy: where L2 drops a line before its load, the load reads HBM.

Measured on the H200 (results/h200-2026-12-01-l2-prefetch.json: 4 decode shapes, M = 1 and 16,
both GEMMs, 2 to 64 steps ahead, timed back to back and after the add + RMSNorm that feeds the
GEMM under PDL): every result bit-identical, and no gain beyond noise (ratios 0.95-1.00, most
0.98-1.00). It stays a tuning choice (default off) that no sweep entry takes.

Inline PTX: the Triton interpreter cannot run it, so the spaces reject ``L2_PREFETCH > 0`` there.
The address must be 16-byte aligned and the size a multiple of 16 (the callers' contract).
"""

import triton
import triton.language as tl


@triton.jit
def prefetch_l2(ptr, nbytes):
    """Ask for ``nbytes`` (a multiple of 16) from ``ptr`` (16-byte aligned) in L2; issued by the
    program's thread 0 only."""
    tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 t; mov.u32 t, %tid.x; setp.eq.u32 p, t, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptr, nbytes], dtype=tl.int32, is_pure=False, pack=1)
