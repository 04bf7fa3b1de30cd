"""Programmatic dependent launch (PDL) for the decode path's own kernels (compute capability 9.0+).

A decode step is hundreds of kernels in a row, each a few to a few tens of microseconds; in a CUDA
graph each still waits for its predecessor to finish before the GPU starts launching it. A kernel
launched with PDL (Triton's ``launch_pdl``) may be launched while its predecessor runs: its
programs start, run :func:`pdl_start` -- wait until the previous kernel has finished and its
writes are visible, then allow the next kernel to launch -- and only then touch memory that a
kernel of the step writes. So the launch of kernel k+1 overlaps the tail of kernel k, and every
result is what a serial launch gives. The M = 1 grid GEMVs (bf16 and W12), and the swap-AB
kernels configured with ``PREFETCH``, load their first K step's weights (the W12 GEMV with
``ESC_EARLY``: and the rows' escape ranges) before the wait, and with ``L2_PREFETCH`` ask L2 for
the next steps' weights there (:mod:`.prefetch`). That is safe because the kernel just
before never writes them: no kernel of a step writes a weight (weights are written at load time,
long before a step runs). So those loads may overlap the previous kernel's tail
(``tests/kernels/test_codegen.py`` checks that nothing else is read before the wait).

A kernel that does not wait (fla-core's, inductor's, cuBLAS's) is never launched with PDL; it
waits for its predecessor as usual. ``SPECPILOT_PDL=0`` turns PDL off (:func:`pdl_disabled` for a
scope); under the Triton interpreter and before compute capability 9.0 it is off.
"""

import contextlib
import functools
import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents
from triton.language.extra.cuda import gdc_wait

from specpilot.kernels.common.interpret import interpreting

_ENABLED = [os.environ.get("SPECPILOT_PDL", "1") != "0"]


@functools.lru_cache(maxsize=None)
def _capable(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def pdl_launch(device: torch.device) -> dict:
    """Launch keywords: the kernel's ``PDL`` constexpr and Triton's ``launch_pdl``, both on for a
    CUDA device of compute capability 9.0 or later unless PDL is disabled."""
    on = (_ENABLED[0] and device.type == "cuda" and not interpreting()
          and _capable(device.index if device.index is not None else torch.cuda.current_device()))
    return {"PDL": on, "launch_pdl": on}


@contextlib.contextmanager
def pdl_disabled():
    """Launch without PDL inside this scope (an A/B of PDL itself; graphs captured in it keep
    that)."""
    saved, _ENABLED[0] = _ENABLED[0], False
    try:
        yield
    finally:
        _ENABLED[0] = saved


@triton.jit
def pdl_start(PDL: tl.constexpr):
    """Before a PDL kernel's first access to memory that a kernel of the step writes: wait for
    the previous kernel (finished, writes visible), then let the next kernel launch (its programs
    wait in turn)."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
