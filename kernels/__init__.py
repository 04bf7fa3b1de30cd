"""Triton decode kernels, their torch references and tuning spaces (``specpilot.kernels``).

One folder per op (STYLE.md items 9-10): ``reference.py`` (pure torch, fp32 accumulation,
``<op>_ref``), ``triton.py`` (``<op>_fwd_kernel_<suffix>`` kernels and a launcher ``<op>`` with the
reference's exact signature), ``space.py`` (the tuning space as data: ``KEY``, ``PARAMS``,
``configs()``, ``SWEEP``).

- :mod:`specpilot.kernels.skinny_gemm`: bf16 ``[M, K] x [N, K]^T`` for decode and verify
  (M = 1..64).
- :mod:`specpilot.kernels.w12`: the lossless 12-bit BF16 weight format (``W12Tensor``,
  pack/unpack).
- :mod:`specpilot.kernels.w12_gemm`: the skinny GEMM on W12 weights, decoded in registers.
- :mod:`specpilot.kernels.tuning`: the on-disk config cache (torch only) and the Optuna tuner
  (lazy).
- :mod:`specpilot.kernels.common`: split-K epilogue, correctness check, timers, roofline,
  programmatic dependent launch (:mod:`~specpilot.kernels.common.pdl`).
- :mod:`specpilot.kernels.gated_delta_rule`: Gated DeltaNet (fla on CUDA, torch reference
  elsewhere).
- The decode path's small kernels, each next to its reference:
  :mod:`~specpilot.kernels.add_rms_norm`, :mod:`~specpilot.kernels.short_conv`,
  :mod:`~specpilot.kernels.gated_rms_norm`, :mod:`~specpilot.kernels.qk_norm_rope`,
  :mod:`~specpilot.kernels.kv_write` and
  :mod:`~specpilot.kernels.slot_attention` (masked attention over the slot KV cache + output gate).

Importing this package needs torch (+ triton for the kernels) only.
"""
