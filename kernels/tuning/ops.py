"""What the tuner and the H200 script need per tunable op: its space, launcher and a test case.

``OPS`` maps an op name to the dotted module of its package; nothing is imported until asked.
"""

import dataclasses
import functools
import importlib
from collections.abc import Callable
from types import ModuleType

import torch

from specpilot.kernels.common.check import gemm_exact
from specpilot.kernels.common.roofline import Traffic
from specpilot.kernels.common.roofline import gemm_traffic

OPS = {
    "skinny_gemm": "specpilot.kernels.skinny_gemm",
    "w12_gemm": "specpilot.kernels.w12_gemm",
    "w12f_gemm": "specpilot.kernels.w12f_gemm",
}


def space_of(op: str) -> ModuleType:
    """The ``space`` module of ``op``."""
    if op not in OPS:
        raise ValueError(f"unknown kernel op {op!r}; tunable ops: {sorted(OPS)}")
    return importlib.import_module(OPS[op] + ".space")


def space_id(space: ModuleType) -> str:
    """A short hash of the space's parameters and their choices. Optuna studies carry it in their
    names: a study asked with other categorical choices than it stored refuses them, so a study of
    an older space is left alone and a new one starts."""
    from specpilot.fingerprint import stable_hash

    return stable_hash(space.PARAMS)[:8]


def complete_config(space: ModuleType, config: dict) -> dict:
    """``config`` with the defaults of parameters its kernel gained after it was stored
    (``space.ADDED_DEFAULTS``, e.g. ``K_STAGES: 1``, the loop as it ran before) and without those
    it lost (``space.REMOVED_KEYS``: now derived from others), so tuned entries and results of an
    older space stay usable."""
    kernel = config.get("kernel")
    added = getattr(space, "ADDED_DEFAULTS", {}).get(kernel, {})
    removed = getattr(space, "REMOVED_KEYS", {}).get(kernel, ())
    return {**added, **{k: v for k, v in config.items() if k not in removed}}


def valid_sweep(space: ModuleType, m: int, n: int, k: int) -> list[dict]:
    """The space's SWEEP configs that can run ``[m, k] x [n, k]^T``, in the sweep's order."""
    out = []
    for config in space.SWEEP:
        try:
            space.validate(config, m, n, k)
        except ValueError:
            continue
        out.append(config)
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    """One problem instance: ``args`` per rotating weight copy (x, weight), the fp64 exact result
    of
    ``args[0]`` with its error scale ``|x| @ |w|^T``, and the call's compulsory traffic."""

    m: int
    n: int
    k: int
    args: list[tuple]
    exact: torch.Tensor
    abs_sum: torch.Tensor
    traffic: Traffic


@dataclasses.dataclass(frozen=True)
class TunableOp:
    """A tunable op: ``launcher(x, weight, out_dtype=None, config=None)`` and its ``space``."""

    name: str
    space: ModuleType
    launcher: Callable
    make_case: Callable[..., Case]


OUTLIER_RATE = 2e-4
"""The outlier rate of the weights a case is timed on: about 2.75e-4 W12 escapes, as big LLMs'
1.8-5e-4 (REFERENCE-kernels.md). The sweeps have timed on it since 2026-12-02; the tuner's cases
used ``synthetic_weight``'s 1e-3 until 2026-12-04, so it tuned the W12 GEMMs on five times the
outliers (and escape work) of the weights they serve."""
CASE_ID = f"outliers={OUTLIER_RATE:g}"
"""Part of every study name: trials timed on other weights are another study's (not compared)."""


def synthetic_weight(n: int, k: int, device: torch.device, seed: int,
                     outlier_rate: float | None = 1e-3) -> torch.Tensor:
    """N(0, 0.02) bf16 ``[N, K]`` with a sprinkle of exact zeros, tiny values and large outliers,
    so W12 escapes (and any bug in applying them) change the output visibly. ``outlier_rate``
    None: no W12 escape at all (no sprinkle, and every magnitude raised to at least 2^-15 of the
    largest, so all exponents share one 16-wide window), for timing a W12 GEMM without its
    escape work."""
    gen = torch.Generator(device=device).manual_seed(seed)
    w = torch.randn((n, k), generator=gen, device=device) * 0.02
    if outlier_rate is None:
        top = torch.frexp(w.abs().max().to(torch.bfloat16).float()).exponent - 1  # 2^top <= max
        floor = torch.ldexp(torch.ones((), device=device), top - 15)
        return ((w.sign() + (w == 0)) * torch.maximum(w.abs(), floor)).to(torch.bfloat16)
    num = max(3, int(n * k * outlier_rate))
    idx = torch.randint(0, n * k, (num,), generator=gen, device=device)
    flat = w.view(-1)
    flat[idx[0::3]] = 0.0
    flat[idx[1::3]] = torch.randn(idx[1::3].numel(), generator=gen, device=device) * 4.0
    flat[idx[2::3]] = 3e-30
    return w.to(torch.bfloat16)


def _x(m: int, k: int, device: torch.device, seed: int) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return torch.randn((m, k), generator=gen, device=device).to(torch.bfloat16)


def _skinny_case(m: int, n: int, k: int, device: torch.device, seed: int = 0,
                 num_copies: int = 1, outlier_rate: float | None = OUTLIER_RATE) -> Case:
    w = synthetic_weight(n, k, device, seed, outlier_rate)
    x = _x(m, k, device, seed)
    exact, abs_sum = gemm_exact(x, w)
    args = [(x, w)] + [(x, w.clone()) for _ in range(num_copies - 1)]
    return Case(m, n, k, args, exact, abs_sum, gemm_traffic(m, n, k, w.numel() * 2))


def _w12_case(m: int, n: int, k: int, device: torch.device, seed: int = 0,
              num_copies: int = 1, order: str = "rows",
              outlier_rate: float | None = OUTLIER_RATE) -> Case:
    from specpilot.kernels import w12

    w = synthetic_weight(n, k, device, seed, outlier_rate)
    x = _x(m, k, device, seed)
    exact, abs_sum = gemm_exact(x, w)
    packed = w12.pack(w, order=order)
    del w
    args = [(x, packed)] + [(x, packed.clone()) for _ in range(num_copies - 1)]
    return Case(m, n, k, args, exact, abs_sum, gemm_traffic(m, n, k, packed.nbytes))


def get_op(name: str) -> TunableOp:
    """The :class:`TunableOp` called ``name`` (imports its package)."""
    space = space_of(name)
    module = importlib.import_module(OPS[name])
    make_case = {"skinny_gemm": _skinny_case, "w12_gemm": _w12_case,
                 "w12f_gemm": functools.partial(_w12_case, order="frag")}[name]
    return TunableOp(name, space, getattr(module, name), make_case)
