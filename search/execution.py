"""Running jobs on the worker pool: one job per idle worker, re-run elsewhere when a worker dies.

The driver hands ``run_jobs`` a list of ``Job``s; each finishes with a result whose ``state`` says
what happened (``ok``, ``invalid``, ``error``, ``crashed``, ``timeout``). A worker that dies
mid-job (its node went away, its process was killed) raises an actor error here: that attempt is
reported through ``on_lost`` (the driver records it as KILLED) and the job goes back to the front
of the queue for another worker, up to ``max_attempts`` attempts in all.
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

    lost_errors = _actor_errors()
    pending = deque(jobs)
    idle = list(pool.workers)
    inflight: dict = {}  # ref -> (job, worker, deadline)
    while pending or inflight:
        while pending and idle:
            worker, job = idle.pop(0), pending.popleft()
            ref = worker.run.remote(job.spec, timeout_s)
            inflight[ref] = (job, worker, time.monotonic() + timeout_s + GRACE_S)
            if on_start is not None:
                on_start(job, worker)
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=POLL_S)
        now = time.monotonic()
        overdue = [ref for ref, (_, _, deadline) in inflight.items()
                   if ref not in ready and now > deadline]
        for ref in list(ready) + overdue:
            job, worker, _ = inflight.pop(ref)
            try:
                if ref in overdue:
                    ray.cancel(ref, force=True)
                    raise TimeoutError(f"worker silent for {timeout_s + GRACE_S:g} s")
                result = ray.get(ref)
            except (*lost_errors, TimeoutError) as err:
                lost = {"state": "worker_lost", "error": f"{type(err).__name__}: {err}"[:2000],
                        "worker": {"actor_id": worker._actor_id.hex()}, "attempt": job.attempt}
                if on_lost is not None:
                    on_lost(job, lost)
                pool.replace(worker)
                idle.append(pool.workers[-1])
                if job.attempt < max_attempts:
                    pending.appendleft(dataclasses.replace(job, attempt=job.attempt + 1))
                else:
                    on_done(job, {**lost, "state": "crashed",
                                  "error": f"worker lost on all {job.attempt} attempts: "
                                           f"{lost['error']}"})
                continue
            idle.append(worker)
            on_done(job, {**result, "attempt": job.attempt})
