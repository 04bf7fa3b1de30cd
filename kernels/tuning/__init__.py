"""Kernel tuning: the on-disk config cache (torch only) and the Optuna ask/tell tuner.

- :mod:`specpilot.kernels.tuning.cache`: best configs keyed by (op, shape bucket, GPU SKU + compute
  capability, driver, CUDA, torch, triton); an entry whose key differs in any field is never used.
- :mod:`specpilot.kernels.tuning.ops`: what the tuner needs per op (inputs, launcher, exact
  result).
- :mod:`specpilot.kernels.tuning.study`: ``tune(...)``; imports optuna lazily, so the engine never
  needs it.
"""
