"""Timers for kernel calls: CUDA-graph replays on a GPU, ``perf_counter`` on CPU.

Callers pass one call per *rotating weight copy* (at least 3, and enough bytes to overflow L2), so
each timed call streams its weights from HBM, as a decode step does.

Two options of the CUDA timer say what a "call" pays besides its own work:

- ``queued`` (default): a GPU-side sleep is enqueued before the start event, so the host has
  queued the event, the graph and the end event before the GPU reaches them. Without it the GPU
  is idle when the start event is recorded, and the host's graph launch falls between the events:
  a cost per replay, not per kernel, that a decode step's graph of hundreds of kernels pays once.
  On the H200 it added 0.3-2 us to each call of a 3-call replay, to every kernel alike (a plain
  read, cuBLAS, Triton, W12; results/h200-2026-12-02-timer.json); records timed before 0eefdc4
  include it.
- ``warmup_ms``: before the timed replays the graph is replayed until the GPU has spent this long
  in it. With only a replay or two of warm-up, the first config timed after a case was built (its
  weights packed, the exact product computed) ran up to 10.7% slower than its identical repeats
  (results/h200-2026-12-03-warmup-probe.json); the sweep and probe records before that
  record carry that bias on their first config of each case.
- ``min_calls``: each replay holds at least this many calls (``calls`` repeated), so the one
  boundary per replay (where PDL cannot overlap two kernels) is shared by more of them. Off by
  default: a long chain of one GEMM is not a decode step either (there a GEMM follows a norm or
  an attention kernel), and on the H200 it slowed some split-K and TMA configs by 5-25%.
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


QUEUE_SLEEP_CYCLES = 100_000  # ~50 us at ~2 GHz: longer than the host takes to queue a replay
WARMUP_MS = 20.0  # GPU time replayed before timing
MAX_WARMUP_BATCH = 1024  # replays in the last warm-up batch, however short they are


def warm_up(replay_ms: Callable[[int], float], warmup_ms: float) -> int:
    """Runs ``replay_ms(n)`` (``n`` replays back to back, returning the milliseconds they took) in
    batches of 1, 2, 4, ... replays until ``warmup_ms`` is spent or a batch of
    ``MAX_WARMUP_BATCH`` ran; returns the replays run."""
    spent, batch, total = 0.0, 1, 0
    while spent < warmup_ms:
        spent += replay_ms(batch)
        total += batch
        if batch >= MAX_WARMUP_BATCH:
            break
        batch *= 2
    return total


def time_calls(calls: Sequence[Callable[[], object]], device: torch.device, reps: int = 20,
               inner: int = 1, queued: bool = True, min_calls: int = 1,
               warmup_ms: float | None = None) -> Timing:
    """Median (and p20/p80) time of one call; each of ``calls`` runs ``inner`` times a replay, or
    more often so that a replay holds at least ``min_calls`` calls. ``queued``, ``warmup_ms`` (GPU
    only, default ``WARMUP_MS``; on CPU one pass warms up): see the module."""
    inner = max(inner, -(-min_calls // max(len(calls), 1)))
    if device.type == "cuda":
        warmup_ms = WARMUP_MS if warmup_ms is None else warmup_ms
        return _time_cuda(calls, device, reps, inner, queued, warmup_ms)
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


def _time_cuda(calls, device, reps, inner, queued, warmup_ms) -> Timing:
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            for c in calls:
                c()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    method = f"cuda graph replay of {inner * len(calls)} calls" + (", queued" if queued else "")
    try:
        with torch.cuda.graph(graph):
            for _ in range(inner):
                for c in calls:
                    c()
        run = graph.replay
    except RuntimeError:
        torch.cuda.synchronize(device)
        method = "cuda events (graph capture failed)" + (", queued" if queued else "")

        def run():
            for _ in range(inner):
                for c in calls:
                    c()
    run()
    torch.cuda.synchronize(device)

    def replay_ms(n: int, queue: bool = False) -> float:
        """Milliseconds of ``n`` replays between two events (``queue``: behind a GPU sleep)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if queue:
            torch.cuda._sleep(QUEUE_SLEEP_CYCLES)
        start.record()
        for _ in range(n):
            run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    warm_up(replay_ms, warmup_ms)
    samples = [replay_ms(1, queued) * 1e3 / (inner * len(calls)) for _ in range(reps)]
    return Timing(*_quantiles(samples), reps=reps, method=method)
