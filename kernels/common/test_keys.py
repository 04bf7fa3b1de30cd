"""Test-only config keys that every tunable launcher honours (each space's ``TEST_ONLY_KEYS``).

They let the tuner's tests build the two failures a real config can have, on any backend:

- ``_test_corrupt``: the GEMM's output plus one, a wrong result: the tuner must fail the trial,
  never time it.
- ``_test_hang``: before the GEMM, a kernel that spins on a flag nothing ever sets, as a kernel
  with a broken barrier or lock does. On a GPU it is a real device hang (the process cannot get
  its stream back); under the interpreter the loop never ends. The tuner must kill the trial's
  process and record the trial as timed out (``specpilot.kernels.tuning.isolate``).

Neither key is in any space's ``PARAMS``, so the sampler never proposes them; a caller adds them
through ``tune(extra_params=...)``.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def spin_forever_kernel(flag_ptr):
    # volatile: reloaded every iteration, so the compiler can neither hoist it nor drop the loop
    while tl.load(flag_ptr, volatile=True) == 0:
        pass


def hang_if_asked(x: torch.Tensor, cfg: dict) -> None:
    """Launch :func:`spin_forever_kernel` on ``x``'s device when ``cfg`` asks for a hang."""
    if cfg.get("_test_hang"):
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        spin_forever_kernel[(1,)](flag)


def corrupt_if_asked(out: torch.Tensor, cfg: dict) -> torch.Tensor:
    """``out`` plus one when ``cfg`` asks for a wrong result (in place), else ``out``."""
    if cfg.get("_test_corrupt"):
        out.add_(1)
    return out
