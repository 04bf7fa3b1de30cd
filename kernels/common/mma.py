"""Which tensor-core instruction a swap-AB ``tl.dot`` config compiles to on sm_90: ``MMA_V2``.

On Hopper Triton lowers ``tl.dot`` to ``wgmma`` (its MMA v3: both operands or the B operand in
shared memory, one warpgroup of 4 warps per instruction) whenever a program has 4 or more warps,
and to ``mma.sync`` (v2: operands in registers, per warp) below that. For a skinny GEMM the MMA
work is small either way; what differs is the data path around it. In an H200 probe the bf16
swap-AB kernel compiled to ``mma.sync`` on 4-8 warps ran gate_up (K 5120, N 34816) at M = 4-16 in
85.9-86.8 us, where the sweep of the same day (another machine start) had its ``wgmma`` tiles at
88.0-89.1 and cuBLAS at 86.5-87.6 (results/h200-2026-12-02-mma-v2-probe-bf16.json); a config's
``MMA_V2: 1`` asks for it. In the next sweep, with both in it side by side, mma.sync tiles won 20
of the 30 rows at M = 2-16 that the bf16 swap-AB kernel won, and Triton was no slower than cuBLAS
on 37 of 40 rows at M = 1-16 (32 of 40 on the same day without them;
results/h200-2026-12-02-kernels-mma-v2.json and ...-kernels-dot-sk.json). Before sm_90 there is
no ``wgmma`` and the flag changes nothing.

Triton 3.6 has no per-kernel option for it: its compiler reads the ``DISABLE_MMA_V3``
environment variable at every compile (and hashes it into the on-disk cache key). So
:func:`mma_v2_compile` sets that variable, under a lock, around the launch of a config that asks
for v2, and the kernels take ``MMA_V2`` as a constexpr, so that Triton's in-memory cache, keyed by
constexprs, keeps the two compiles apart. It is set on every such launch, not once: any launch
can compile (a new shape specialises the kernel anew). The variable is process-wide while set:
a different kernel that another thread compiles in that instant may compile to ``mma.sync`` too.
Its results stay correct (both instructions compute the same products); only its speed can change.
``tests/kernels/test_codegen.py`` checks the instruction each setting gives.
"""

import contextlib
import os
import threading

ENV = "DISABLE_MMA_V3"
_LOCK = threading.Lock()


@contextlib.contextmanager
def mma_v2_compile(enabled: bool):
    """Within the block, Triton compiles ``tl.dot`` to ``mma.sync`` (if ``enabled``)."""
    if not enabled:
        yield
        return
    with _LOCK:
        before = os.environ.get(ENV)
        os.environ[ENV] = "1"
        try:
            yield
        finally:
            if before is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = before
