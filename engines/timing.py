"""Per-phase step timing from device events (CUDA) or the host clock (CPU), opt-in per request.

``PhaseTimer`` marks the draft, verify, accept and commit sections of every decode step; on CUDA the
marks are events recorded on the stream (no synchronisation inside the step), read once at the end.
``ms_per_step()`` gives each phase's mean time per step; ``overhead`` is the rest of the step time
(host scheduling, Python, launch gaps) measured as step wall time minus the phases.
"""

import contextlib
import time

import torch


class PhaseTimer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, object, object]] = []
        self.step_s: list[float] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
        else:
            start = time.perf_counter()
            yield
            end = time.perf_counter()
        self.marks.append((name, start, end))

    @contextlib.contextmanager
    def step(self):
        start = time.perf_counter()
        yield
        if self.cuda:
            torch.cuda.synchronize()
        self.step_s.append(time.perf_counter() - start)

    def ms_per_step(self) -> dict[str, float]:
        """Mean milliseconds per step of each phase, plus ``overhead`` (step time not in a phase)."""
        if self.cuda:
            torch.cuda.synchronize()
        totals: dict[str, float] = {}
        for name, start, end in self.marks:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3
            totals[name] = totals.get(name, 0.0) + ms
        steps = max(len(self.step_s), 1)
        out = {name: total / steps for name, total in totals.items()}
        out["overhead"] = max(sum(self.step_s) * 1e3 / steps - sum(out.values()), 0.0)
        return out
