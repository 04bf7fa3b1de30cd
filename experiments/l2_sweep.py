"""The base configs the L2 prefetch experiments vary, and the sweep extension that adds them.

``h200_l2_prefetch.py`` times each base config at every ``L2_PREFETCH`` value; ``kernels_h200.py``
and ``h200_w12_ar.py`` take ``--l2 2,8,64`` to add the same variants to both GEMMs' SWEEP, so one
device call both checks (every sweep config is checked against the fp64 result before it is timed)
and picks them where they win.
"""

from specpilot.kernels.skinny_gemm import space as bf16_space
from specpilot.kernels.w12_gemm import space as w12_space


# base configs per (op, M == 1): the H200 sweeps' winners (results/h200-2026-12-01-w12-kernels-*)
BASES = {  # _config args: kernel, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages, ...
    ("w12_gemm", True): [w12_space._config("gemv", 4, 512, 1, 2, 3, "prmt"),
                         w12_space._config("gemv", 8, 256, 1, 4, 3, "prmt"),
                         w12_space._config("gemv", 4, 256, 1, 1, 3, "prmt", esc_chunk=4,
                                           k_stages=3, esc_early=1)],
    ("w12_gemm", False): [w12_space._config("dot", 32, 128, 1, 2, 3, "prmt", prefetch=1),
                          w12_space._config("dot", 16, 128, 1, 1, 4, "prmt", prefetch=1)],
    ("skinny_gemm", True): [bf16_space._config("gemv", 8, 256, 1, 4, 3, k_stages=4),
                            bf16_space._config("gemv", 8, 512, 1, 4, 3)],
    ("skinny_gemm", False): [bf16_space._config("dot", 64, 128, 1, 4, 4, prefetch=1),
                             bf16_space._config("dot", 128, 128, 1, 4, 3, prefetch=1)],
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
