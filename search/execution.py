"""Running jobs on the worker pool: one job per idle worker, re-run elsewhere when a worker dies.

The driver hands ``run_jobs`` a list of ``Job``s; each finishes with a result whose ``state`` says
what happened (``ok``, ``invalid``, ``error``, ``crashed``, ``timeout``). A worker that dies
mid-job (its node went away, its process was killed) raises an actor error here: that attempt is
reported through ``on_lost`` (the driver records it as KILLED) and the job goes back to the front
of the queue for another worker, up to ``max_attempts`` attempts in all. The retry avoids the
device (node and GPU) it was lost on while the pool has a worker on another device: a GPU that just
lost a worker is the last place to try again.
"""

import dataclasses
import time
from collections import deque
from typing import Callable

POLL_S = 1.0
GRACE_S = 60.0
"""Beyond the job's own subprocess timeout, how long a silent worker is given before it is lost."""


@dataclasses.dataclass
class Job:
    key: str
    spec: dict
    meta: dict = dataclasses.field(default_factory=dict)
    attempt: int = 1
    avoid: tuple | None = None
    """The device (``WorkerPool.device_of``) this job was lost on; retries go elsewhere."""


def pick(pending: deque, idle: list, device_of: Callable, devices: set) -> tuple | None:
    """The first (job, worker) that may run now: a job with ``avoid`` waits for an idle worker on
    another device while any worker of the pool (``devices``) is on one."""
    for job in pending:
        for worker in idle:
            device = device_of(worker)
            if device is None:
                continue  # not placed yet (waiting for a free GPU)
            if job.avoid is None or device != job.avoid or devices <= {job.avoid}:
                return job, worker
    return None


def _actor_errors() -> tuple:
    from ray.exceptions import GetTimeoutError
    from ray.exceptions import RayActorError

    errors = [RayActorError, GetTimeoutError]
    try:
        from ray.exceptions import ActorUnavailableError

        errors.append(ActorUnavailableError)
    except ImportError:
        pass
    return tuple(errors)


def run_jobs(pool, jobs: list[Job], timeout_s: float, max_attempts: int,
             on_done: Callable[[Job, dict], None],
             on_lost: Callable[[Job, dict], None] | None = None,
             on_start: Callable[[Job, object], None] | None = None) -> None:
    """Run every job; ``on_done(job, result)`` is called once per job, in completion order."""
    import ray

    if not pool.workers:
        from specpilot.errors import SpecPilotError

        raise SpecPilotError("the worker pool is closed (its campaign ended)")
    lost_errors = _actor_errors()
    pending = deque(jobs)
    idle = list(pool.workers)
    inflight: dict = {}  # ref -> (job, worker, deadline)
    unplaced_since = None
    while pending or inflight:
        for dead in [w for w in idle if pool.died_unplaced(w)]:  # never got a GPU: replace it
            idle.remove(dead)
            pool.replace(dead)
            idle.append(pool.workers[-1])
        while pending and idle:
            chosen = pick(pending, idle, pool.device_of, pool.devices())
            if chosen is None:
                break
            job, worker = chosen
            pending.remove(job)
            idle.remove(worker)
            ref = worker.run.remote(job.spec, timeout_s)
            inflight[ref] = (job, worker, time.monotonic() + timeout_s + GRACE_S)
            if on_start is not None:
                on_start(job, worker)
        if not inflight:  # every idle worker is still waiting for a GPU
            unplaced_since = unplaced_since or time.monotonic()
            if time.monotonic() - unplaced_since > timeout_s + GRACE_S:
                from specpilot.errors import SpecPilotError

                raise SpecPilotError(f"no worker got a GPU in {timeout_s + GRACE_S:g} s "
                                     f"({len(pending)} job(s) waiting)")
            time.sleep(POLL_S)
            continue
        unplaced_since = None
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_S)
        now = time.monotonic()
        overdue = [ref for ref, (_, _, deadline) in inflight.items()
                   if ref not in ready and now > deadline]
        for ref in list(ready) + overdue:
            job, worker, _ = inflight.pop(ref)
            try:
                if ref in overdue:  # a silent worker is killed (actor tasks cannot be force-cancelled)
                    ray.kill(worker, no_restart=True)
                    raise TimeoutError(f"worker silent for {timeout_s + GRACE_S:g} s")
                result = ray.get(ref)
            except (*lost_errors, TimeoutError) as err:
                lost = {"state": "worker_lost", "error": f"{type(err).__name__}: {err}"[:2000],
                        "worker": {"actor_id": worker._actor_id.hex()}, "attempt": job.attempt}
                lost["worker"]["device"] = pool.device_of(worker)
                if on_lost is not None:
                    on_lost(job, lost)
                pool.replace(worker)
                idle.append(pool.workers[-1])
                if job.attempt < max_attempts:
                    pending.appendleft(dataclasses.replace(job, attempt=job.attempt + 1,
                                                           avoid=pool.device_of(worker)))
                else:
                    on_done(job, {**lost, "state": "crashed",
                                  "error": f"worker lost on all {job.attempt} attempts: "
                                           f"{lost['error']}"})
                continue
            idle.append(worker)
            on_done(job, {**result, "attempt": job.attempt})
