"""Roofline records: bytes that must move, FLOPs, achieved TB/s and TFLOP/s, fraction of the
ceiling.

These are the numbers the cost model (DESIGN.md §6) and the kernel-tuning agent consume. "Bytes
that must move" is the compulsory traffic of one call: every weight byte once (bf16: 2 B/weight;
W12: the packed planes plus escape lists), the activations once and the output once. Ceilings are
measured, not datasheet: an H200 streams 4.58 TB/s in a pure-read Triton loop (REFERENCE-kernels.md
§3.1).
"""

import dataclasses

from collections.abc import Callable
from collections.abc import Sequence

import torch

from specpilot.kernels.common.bench import Timing
from specpilot.kernels.common.bench import time_calls


@dataclasses.dataclass(frozen=True)
class Ceiling:
    """Measured ceilings of one GPU SKU: streaming read TB/s and dense bf16 TFLOP/s."""

    gpu: str
    read_tb_s: float
    bf16_tflop_s: float
    source: str


CEILINGS = {
    "NVIDIA H200": Ceiling("NVIDIA H200", 4.58, 770.0,
                           "read: Triton int32 read loop, 2026-11 (REFERENCE-kernels.md §3.1); "
                           "bf16: 8192^3 torch.matmul 694-798 TF/s (measurements/README.md)"),
}


def ceiling_for(gpu: str) -> Ceiling | None:
    """The measured ceiling for a GPU name as torch reports it, or None if never measured."""
    return CEILINGS.get(gpu)


@dataclasses.dataclass(frozen=True)
class Traffic:
    """Compulsory bytes and FLOPs of one kernel call."""

    bytes_moved: int
    flops: int


def gemm_traffic(m: int, n: int, k: int, weight_bytes: int, act_bytes: int = 2,
                 out_bytes: int = 2) -> Traffic:
    """Traffic of ``[M, K] x [N, K]^T -> [M, N]`` with a weight of ``weight_bytes`` in memory."""
    return Traffic(weight_bytes + m * k * act_bytes + m * n * out_bytes, 2 * m * n * k)


@dataclasses.dataclass(frozen=True)
class Roofline:
    """One timed call placed on the roofline; ``frac_*`` are None where no ceiling is known."""

    op: str
    m: int
    n: int
    k: int
    bytes_moved: int
    flops: int
    p20_us: float
    p50_us: float
    p80_us: float
    tb_s: float
    tflop_s: float
    frac_read_ceiling: float | None
    frac_flop_ceiling: float | None
    floor_us: float | None
    bound: str

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return dataclasses.asdict(self)


def place(op: str, m: int, n: int, k: int, traffic: Traffic, timing: Timing,
          ceiling: Ceiling | None) -> Roofline:
    """Place a measured call (median time) on the roofline of ``ceiling``."""
    seconds = timing.p50_us * 1e-6
    tb_s = traffic.bytes_moved / seconds / 1e12 if seconds > 0 else float("inf")
    tflop_s = traffic.flops / seconds / 1e12 if seconds > 0 else float("inf")
    frac_bw = frac_fl = floor_us = None
    bound = "unknown"
    if ceiling is not None:
        frac_bw = tb_s / ceiling.read_tb_s
        frac_fl = tflop_s / ceiling.bf16_tflop_s
        mem_us = traffic.bytes_moved / (ceiling.read_tb_s * 1e12) * 1e6
        flop_us = traffic.flops / (ceiling.bf16_tflop_s * 1e12) * 1e6
        floor_us = max(mem_us, flop_us)
        bound = "memory" if mem_us >= flop_us else "compute"
    return Roofline(op, m, n, k, traffic.bytes_moved, traffic.flops, timing.p20_us, timing.p50_us,
                    timing.p80_us, tb_s, tflop_s, frac_bw, frac_fl, floor_us, bound)


def measure(op: str, m: int, n: int, k: int, traffic: Traffic,
            calls: Sequence[Callable[[], object]], device: torch.device,
            reps: int = 20) -> Roofline:
    """Time ``calls`` (one per rotating weight copy) and place the median on this GPU's roofline.

    Example (bf16 GEMM, 3 weight copies)::

        calls = [lambda w=w: skinny_gemm.linear(x, w) for w in copies]
        roof = measure("skinny_gemm", m, n, k, gemm_traffic(m, n, k, 2 * n * k), calls, x.device)
    """
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return place(op, m, n, k, traffic, time_calls(calls, device, reps=reps), ceiling_for(gpu))
