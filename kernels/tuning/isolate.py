"""Check-then-time kernel configs one at a time, each within a time limit, in a child process.

A tuning space holds configs that can hang the GPU: a kernel spinning on a split-K lock or a
barrier that never comes (Triton's warp-specialized 128-row bf16 tile did, twice, on the H200:
results/h200-2026-12-04-bf16-warp-spec-probe.json). Its stream never drains, so
``torch.cuda.synchronize`` never returns and no exception can reach the process that launched it;
an illegal address, in turn, leaves that process's CUDA context unusable for every later config.
So :class:`TrialProcess` keeps the problem instance (weights, x, exact result) in a spawned child
and sends it one config at a time:

- no answer within ``timeout_s``: the child is killed and the trial is ``"timeout"``; the next
  config gets a fresh child (which rebuilds the case, outside the trial's time limit);
- the child died (a segfault, an out-of-memory kill): the trial is ``"crashed"``;
- an ``"error"`` after which a trivial CUDA op fails too: the child exits and is replaced.

:class:`InProcess` is the same interface without the child, for the Triton interpreter on CPU
(where there is no device to hang and a process per study costs seconds of imports).
"""

import dataclasses
import multiprocessing
from multiprocessing.connection import Connection

import torch

from specpilot.kernels.common.bench import Timing
from specpilot.kernels.common.roofline import Traffic

START_TIMEOUT_S = 600.0
"""How long a child may take to import torch and build the case (fp64 exact result included)."""
KILL_WAIT_S = 60.0
"""How long to wait for a killed child to be reaped (the driver tears down a hung context)."""


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """What a child needs to rebuild the problem instance: ``get_op(op).make_case(...)``."""

    op: str
    m: int
    n: int
    k: int
    device: str
    seed: int = 0
    copies: int = 1


def _context_works(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        torch.ones(1, device=device).add_(1).item()
        return True
    except Exception:  # noqa: BLE001 - any failure here means the context is gone
        return False


def _serve(conn: Connection, spec: CaseSpec, reps: int) -> None:
    """The child: build the case, then answer ``(config, timed)`` requests until ``None``."""
    from specpilot.kernels.tuning.ops import get_op
    from specpilot.kernels.tuning.study import evaluate

    try:
        device = torch.device(spec.device)
        op = get_op(spec.op)
        case = op.make_case(spec.m, spec.n, spec.k, device, spec.seed, spec.copies)
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("failed", f"{type(err).__name__}: {err}"[:2000]))
        return
    conn.send(("ready", case.traffic))
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        if request is None:
            return
        config, timed = request
        state, timing, detail = evaluate(op, case, config, device, reps, timed)
        healthy = state != "error" or _context_works(device)
        conn.send((state, timing, detail, healthy))
        if not healthy:
            return


class _Runner:
    """A context manager that closes the runner on exit."""

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TrialProcess(_Runner):
    """Evaluates configs of one case in a spawned child; see the module docstring."""

    def __init__(self, spec: CaseSpec, reps: int, timeout_s: float,
                 start_timeout_s: float = START_TIMEOUT_S):
        if not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s}")
        self.spec, self.reps, self.timeout_s = spec, reps, timeout_s
        self.start_timeout_s = start_timeout_s
        self.num_started = 0
        self._proc = None
        self._conn: Connection | None = None
        self._traffic: Traffic | None = None

    @property
    def traffic(self) -> Traffic:
        """The case's compulsory traffic (starts a child only if none has built the case yet)."""
        if self._traffic is None:
            self._start()
        return self._traffic

    def _start(self) -> None:
        if self._proc is not None:
            return
        ctx = multiprocessing.get_context("spawn")  # CUDA cannot be used in a forked child
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, self.spec, self.reps), daemon=True,
                           name=f"specpilot-trial-{self.spec.op}")
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.num_started += 1
        if not parent.poll(self.start_timeout_s):
            self._stop(kill=True)
            raise RuntimeError(f"the trial process for {self.spec} did not build its case in "
                               f"{self.start_timeout_s:g} s")
        try:
            kind, payload = parent.recv()
        except EOFError:
            code = self._stop(kill=True)
            raise RuntimeError(f"the trial process for {self.spec} died while building its case "
                               f"(exit code {code})") from None
        if kind != "ready":
            self._stop(kill=True)
            raise RuntimeError(f"the trial process could not build the case {self.spec}: "
                               f"{payload}")
        self._traffic = payload

    def evaluate(self, config: dict, timed: bool = True) -> tuple[str, Timing | None, str]:
        """``(state, timing, detail)`` as :func:`specpilot.kernels.tuning.study.evaluate`, plus
        the states ``"timeout"`` and ``"crashed"``."""
        self._start()
        try:
            self._conn.send((config, timed))
        except (BrokenPipeError, OSError):
            code = self._stop(kill=True)
            return "crashed", None, f"the trial process had exited (exit code {code})"
        if not self._conn.poll(self.timeout_s):
            self._stop(kill=True)
            return ("timeout", None, f"no result within {self.timeout_s:g} s; the trial process "
                    "was killed (a hung kernel cannot be stopped any other way)")
        try:
            state, timing, detail, healthy = self._conn.recv()
        except (EOFError, OSError):
            code = self._stop(kill=True)
            return "crashed", None, f"the trial process died (exit code {code})"
        if not healthy:
            self._stop(kill=False)
            detail += "; the CUDA context failed after it, so the next config gets a new process"
        return state, timing, detail

    def _stop(self, kill: bool) -> int | None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return None
        if kill:
            proc.kill()
        elif conn is not None:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        proc.join(KILL_WAIT_S)
        if proc.is_alive():
            proc.kill()
            proc.join(KILL_WAIT_S)
        if conn is not None:
            conn.close()
        return proc.exitcode

    def close(self) -> None:
        """Stop the child (it finishes the request it is on, if any, then exits)."""
        self._stop(kill=False)


class InProcess(_Runner):
    """:class:`TrialProcess`'s interface, evaluating in this process (no time limit)."""

    def __init__(self, spec: CaseSpec, reps: int):
        from specpilot.kernels.tuning.ops import get_op

        self.spec, self.reps = spec, reps
        self.device = torch.device(spec.device)
        self.op = get_op(spec.op)
        self.case = self.op.make_case(spec.m, spec.n, spec.k, self.device, spec.seed,
                                      spec.copies)
        self.traffic = self.case.traffic

    def evaluate(self, config: dict, timed: bool = True) -> tuple[str, Timing | None, str]:
        from specpilot.kernels.tuning.study import evaluate

        return evaluate(self.op, self.case, config, self.device, self.reps, timed)


def trial_runner(spec: CaseSpec, reps: int, isolate: bool | None = None,
                 timeout_s: float = 120.0) -> TrialProcess | InProcess:
    """A :class:`TrialProcess` when ``isolate`` (default: on a GPU), else :class:`InProcess`."""
    if isolate is None:
        isolate = torch.device(spec.device).type == "cuda"
    return TrialProcess(spec, reps, timeout_s) if isolate else InProcess(spec, reps)
