"""The base configs the L2 prefetch experiments vary, and the sweep extension that adds them.

``h200_l2_prefetch.py`` times each base config at every ``L2_PREFETCH`` value; ``kernels_h200.py``
and ``h200_w12_ar.py`` take ``--l2 2,8,64`` to add the same variants to both GEMMs' SWEEP, so one
device call both checks (every sweep config is checked against the fp64 result before it is timed)
and picks them where they win.
"""

from specpilot.kernels.skinny_gemm import space as bf16_space
from specpilot.kernels.w12_gemm import space as w12_space


def _w12(kernel, bn, bk, warps, stages, **extra):
    base = {"kernel": kernel, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1, "num_warps": warps,
            "num_stages": stages, "DECODE": "prmt", "ESC_CHUNK": 1}
    if kernel == "gemv":
        return {**base, "K_STAGES": 1, "ESC_EARLY": 0, **extra}
    return {**base, "PREFETCH": 1, **extra}


def _bf16(kernel, bn, bk, warps, stages, **extra):
    base = {"kernel": kernel, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1, "num_warps": warps,
            "num_stages": stages}
    return {**base, "K_STAGES": 1, **extra} if kernel == "gemv" else {**base, "PREFETCH": 1,
                                                                        **extra}


# base configs per (op, M == 1): the H200 sweeps' winners (results/h200-2026-12-01-w12-kernels-*)
BASES = {
    ("w12_gemm", True): [_w12("gemv", 4, 512, 2, 3), _w12("gemv", 8, 256, 4, 3),
                         _w12("gemv", 4, 256, 1, 3, ESC_CHUNK=4, K_STAGES=3, ESC_EARLY=1)],
    ("w12_gemm", False): [_w12("dot", 32, 128, 2, 3), _w12("dot", 16, 128, 1, 4)],
    ("skinny_gemm", True): [_bf16("gemv", 8, 256, 4, 3, K_STAGES=4), _bf16("gemv", 8, 512, 4, 3)],
    ("skinny_gemm", False): [_bf16("dot", 64, 128, 4, 4), _bf16("dot", 128, 128, 4, 3)],
}


def extend_sweeps(l2_values: list[int]) -> int:
    """Append each base config at each nonzero ``L2_PREFETCH`` value to its space's SWEEP (both
    GEMMs); returns how many configs were added."""
    added = 0
    for (op, _), bases in BASES.items():
        sweep = (w12_space if op == "w12_gemm" else bf16_space).SWEEP
        for base in bases:
            for l2 in l2_values:
                config = {**base, "L2_PREFETCH": l2}
                if l2 and config not in sweep:
                    sweep.append(config)
                    added += 1
    return added
