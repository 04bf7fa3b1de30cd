"""``specpilot tune-kernel OP --shape K,N --m 1,4,8,16,32 [--trials N]``: tune one kernel with
Optuna.

For each M, an Optuna study (ask/tell) searches the op's ``space.py``; every trial is checked
against the exact result before it is timed, and the best config is cached under (op, shape bucket,
GPU SKU + compute capability, driver, CUDA, torch, triton). On a GPU each config is compiled,
checked and timed in a child process killed after ``--trial-timeout-s``: a config that hangs the
device is a failed trial (``timeout``) and the next one runs in a fresh process. On a machine
without a GPU,
``--device cpu`` runs the kernels through the Triton interpreter (tiny shapes only: it is a
functional check, not a speed measurement).
"""

import dataclasses
import math
import os
from typing import Annotated
from typing import Literal

from specpilot.cli import Positional
from specpilot.errors import SpecPilotError


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"--{name} needs positive integers, got {text!r}")
    return values


@dataclasses.dataclass(frozen=True)
class Args:
    """Arguments of ``specpilot tune-kernel``."""

    op: Annotated[Literal["skinny_gemm", "w12_gemm", "w12f_gemm"], Positional, "kernel op to tune"]
    shape: Annotated[str, "weight shape as K,N (in features, out features)"]
    m: Annotated[str, "comma-separated token counts M to tune for"] = "1,4,8,16,32"
    trials: Annotated[int, "checked trials per M"] = 30
    device: Annotated[Literal["cuda", "cpu"], "cuda, or cpu (Triton interpreter)"] = "cuda"
    seed: Annotated[int, "seed of the Optuna sampler and the synthetic weights"] = 0
    storage: Annotated[str | None, "Optuna storage: sqlite URL, *.db or journal path"] = None
    force: Annotated[bool, "tune even when a cached config exists for this environment"] = False
    trial_timeout_s: Annotated[float, "seconds one config may take (compile, check, timing) "
                                      "before its process is killed"] = 120.0
    isolate: Annotated[bool | None, "run each config in a child process killed after "
                       "--trial-timeout-s (default: yes on cuda, no on cpu)"] = None

    def __post_init__(self):
        k_n = _ints(self.shape, "shape")
        if len(k_n) != 2:
            raise ValueError(f"--shape must be K,N, got {self.shape!r}")
        _ints(self.m, "m")
        if self.trials < 1:
            raise ValueError(f"--trials must be >= 1, got {self.trials}")
        if not 0 < self.trial_timeout_s < math.inf:
            raise ValueError(f"--trial-timeout-s must be a positive number of seconds, got "
                             f"{self.trial_timeout_s}")


def run(args: Args) -> int:
    """Tune, print one row per M, return 0 if every M found a config that passed its check."""
    if args.device == "cpu":
        # The interpreter must be chosen before triton is first imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SpecPilotError("no CUDA device here; use --device cpu for an interpreter run")
    from specpilot.kernels.tuning.study import tune

    k, n = _ints(args.shape, "shape")
    try:
        results = tune(args.op, n, k, _ints(args.m, "m"), trials=args.trials, device=args.device,
                       seed=args.seed, storage=args.storage, force=args.force,
                       isolate=args.isolate,
                       trial_timeout_s=args.trial_timeout_s)
    except ValueError as err:
        raise SpecPilotError(str(err)) from err
    print(f"{'M':>4} {'p50 us':>9} {'TB/s':>6} {'%ceil':>6} {'ok':>3} {'fail':>4}  config")
    for r in results:
        if r.config is None:
            print(f"{r.m:>4} {'-':>9} {'-':>6} {'-':>6} {r.num_ok:>3} {r.num_failed:>4}  "
                  "none passed")
            continue
        p50 = f"{r.timing.p50_us:.1f}" if r.timing else "cached"
        tb = f"{r.roofline.tb_s:.2f}" if r.roofline else "-"
        frac = r.roofline.frac_read_ceiling if r.roofline else None
        pct = f"{100 * frac:.0f}" if frac is not None else "-"
        print(f"{r.m:>4} {p50:>9} {tb:>6} {pct:>6} {r.num_ok:>3} {r.num_failed:>4}  {r.config}")
    print(f"cache: {results[0].cache_path}" if results else "nothing tuned")
    return 0 if all(r.config is not None for r in results) else 1
