"""A scheduler thread in front of :class:`BatchEngine`: admission, continuous batching, cancellation.

``submit`` queues a request and returns at once; the scheduler thread admits queued requests while
rows are free (a full server queues, it never fails a request for lack of room), runs one batched
step for everything running, and reports each request's new tokens through its callback (from the
scheduler thread). A failing step fails the requests it ran, never the thread.
"""

import collections
import dataclasses
import threading
import time

from specpilot.engines.admission import Admission
from specpilot.engines.batch import BatchEngine
from specpilot.engines.batch import Running
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams


@dataclasses.dataclass(frozen=True)
class Event:
    """New tokens of one request; the last event has ``finished`` set (and ``error`` on failure)."""

    request_id: str
    new_tokens: list[int]
    finished: bool = False
    finish_reason: str | None = None
    error: str | None = None
    accept_lengths: tuple[int, ...] = ()


@dataclasses.dataclass
class Stats:
    requests_total: int = 0
    requests_failed: int = 0
    tokens_total: int = 0
    steps_total: int = 0
    admissions_total: int = 0  # prefill rounds: each one stalls every running row once
    step_seconds_total: float = 0.0  # wall time in decode steps ...
    admission_seconds_total: float = 0.0  # ... and in prefill rounds (the rest: host work, idle)
    step_seconds: list = dataclasses.field(default_factory=list)  # recent step times
    accept_lengths: collections.Counter = dataclasses.field(default_factory=collections.Counter)


class Scheduler:
    def __init__(self, engine: Engine, max_batch: int = 16, batch: BatchEngine | None = None):
        """``batch``: an idle batched engine of ``engine`` to reuse (its caches and captured
        graphs), e.g. across a benchmark's repetitions; default: a new one of ``max_batch`` rows."""
        if batch is not None and (batch.engine is not engine or batch.running):
            raise ValueError("a reused batched engine must be idle and belong to this engine")
        self.engine = engine
        self.batch = batch if batch is not None else BatchEngine(engine, max_batch)
        self.stats = Stats()
        self.admission = Admission.for_recipe(engine.recipe)
        self._waiting: collections.deque = collections.deque()
        self._callbacks: dict = {}
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="specpilot-scheduler", daemon=True)
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self.batch.running)

    def check(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError now if the request can never run (so the caller can answer 4xx)."""
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) + params.max_new_tokens > self.engine.context:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens "
                             f"({params.max_new_tokens}) exceeds the context of "
                             f"{self.engine.context} tokens")

    def submit(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
               on_event, replay=None) -> None:
        """Queue a request; ``replay`` (benchmarks only) is a ReplayPlan for simulated acceptance."""
        self.check(prompt_ids, params)
        stops = set(params.stop_token_ids)
        if not params.ignore_eos:
            stops.update(self.engine.target.eos_token_ids)
        with self._lock:
            self._callbacks[request_id] = on_event
            self._waiting.append(Running(request_id, list(prompt_ids), params, stops,
                                         replay=replay))
            self.stats.requests_total += 1
        self._wake.set()

    def cancel(self, request_id: str) -> None:
        """Stop a request (client gone); it leaves the batch before the next step."""
        with self._lock:
            self._cancelled.add(request_id)
        self._wake.set()

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=10)

    def _emit(self, req: Running, tokens, finished=False, error=None):
        callback = self._callbacks.get(req.request_id)
        if finished:
            self._callbacks.pop(req.request_id, None)
        if callback is not None:
            callback(Event(req.request_id, list(tokens), finished, req.finish_reason, error,
                           tuple(req.accept_lengths)))

    def _drop(self, req: Running, error: str | None = None) -> None:
        if req in self.batch.running:
            self.batch.remove(req)
        if error is not None:
            self.stats.requests_failed += 1
            req.finish_reason = "error"
        self._emit(req, [], finished=True, error=error)

    def _admit(self) -> None:
        """Every queued request that has a free row joins (prefilled together when the recipe
        batches prefills), now or, with grouped admission, once enough can join together; one that
        fails is dropped with its error, the others go on."""
        with self._lock:
            joinable = min(self.batch.free_rows, len(self._waiting))
        if not self.admission.ready(joinable, len(self.batch.running)):
            return
        joining = []
        while self.batch.free_rows > len(joining) and self._waiting:
            with self._lock:
                req = self._waiting.popleft()
                cancelled = req.request_id in self._cancelled
            if cancelled:
                self._drop(req)
            else:
                joining.append(req)
        if not joining:
            return
        self.stats.admissions_total += 1
        start = time.perf_counter()
        # an overlapped step still running is decode time: the prefill would otherwise wait for
        # it inside the admission's clock
        if self.batch.wait_in_flight():
            waited = time.perf_counter() - start
            self.stats.step_seconds_total += waited
            start += waited
        try:
            failed = {id(req): err for req, err in self.batch.add_many(joining)}
        except Exception as err:  # noqa: BLE001 - the whole admission failed; the server goes on
            running = {id(r) for r in self.batch.running}
            failed = {id(req): err for req in joining if id(req) not in running}
        self.stats.admission_seconds_total += time.perf_counter() - start
        for req in joining:
            if id(req) in failed:
                self._drop(req, f"prefill failed: {failed[id(req)]}")
                continue
            self.stats.tokens_total += len(req.tokens)
            self._emit(req, req.tokens)

    def _retire(self) -> None:
        with self._lock:
            cancelled, self._cancelled = self._cancelled, set()
        for req in list(self.batch.running):
            if req.request_id in cancelled:
                req.finish_reason = "abort"
                self._drop(req)
            elif req.finish_reason is not None:
                self._drop(req)
        if cancelled:
            with self._lock:  # cancelled while still queued: handled at admission
                self._cancelled |= {r.request_id for r in self._waiting} & cancelled

    def _loop(self) -> None:
        while not self._stop:
            self._retire()
            self._admit()
            self._retire()
            if not self.batch.running:
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            start = time.perf_counter()
            try:
                results = self.batch.step()
            except Exception as err:  # noqa: BLE001 - fail this batch, keep serving
                for req in list(self.batch.running):
                    self._drop(req, f"decode step failed: {err}")
                continue
            elapsed = time.perf_counter() - start
            self.stats.steps_total += 1
            self.stats.step_seconds_total += elapsed
            self.stats.step_seconds = (self.stats.step_seconds + [elapsed])[-512:]
            for req, tokens in results:
                self.stats.tokens_total += len(tokens)
                self.stats.accept_lengths[len(tokens)] += 1
                self._emit(req, tokens)
