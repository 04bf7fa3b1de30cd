"""Timers for kernel calls: CUDA-graph replays on a GPU, ``perf_counter`` on CPU.

Callers pass one call per *rotating weight copy* (at least 3, and enough bytes to overflow L2), so
each timed call streams its weights from HBM, as a decode step does.
"""

import dataclasses
import statistics
import time
from collections.abc import Callable
from collections.abc import Sequence

import torch


@dataclasses.dataclass(frozen=True)
class Timing:
    """Per-call time quantiles over ``reps`` replays, in microseconds."""

    p20_us: float
    p50_us: float
    p80_us: float
    reps: int
    method: str

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return dataclasses.asdict(self)


def _quantiles(samples: list[float]) -> tuple[float, float, float]:
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    q = statistics.quantiles(samples, n=10, method="inclusive")
    return q[1], statistics.median(samples), q[7]


def num_copies_for(weight_bytes: int, l2_bytes: int = 60 * 2**20, minimum: int = 3,
                   maximum: int = 64) -> int:
    """Weight copies to rotate so one round streams >= 3x the L2 size (and >= ``minimum``)."""
    need = -(-3 * l2_bytes // max(weight_bytes, 1))
    return int(min(maximum, max(minimum, need)))


def time_calls(calls: Sequence[Callable[[], object]], device: torch.device, reps: int = 20,
               inner: int = 1) -> Timing:
    """Median (and p20/p80) time of one call; each of ``calls`` runs ``inner`` times a replay."""
    if device.type == "cuda":
        return _time_cuda(calls, device, reps, inner)
    for c in calls:
        c()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            for c in calls:
                c()
        samples.append((time.perf_counter() - t0) * 1e6 / (inner * len(calls)))
    return Timing(*_quantiles(samples), reps=reps, method="cpu perf_counter")


def _time_cuda(calls, device, reps, inner) -> Timing:
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    method = "cuda graph replay"
    try:
        with torch.cuda.graph(graph):
            for _ in range(inner):
                for c in calls:
                    c()
        run = graph.replay
    except RuntimeError:
        torch.cuda.synchronize(device)
        method = "cuda events (graph capture failed)"

        def run():
            for _ in range(inner):
                for c in calls:
                    c()
    run()
    torch.cuda.synchronize(device)
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (inner * len(calls)))
    return Timing(*_quantiles(samples), reps=reps, method=method)
