"""Ray GPU workers: one long-lived actor per GPU, each job in a fresh subprocess with a timeout.

Routing: a worker asks for ``num_gpus=1`` plus the accelerator-type resource of the setting's GPU
(``accelerator_type:H200`` ...), so a campaign for one SKU never lands on another. CPU settings run
on logical GPUs (``ray start --num-gpus N`` or ``ray.init(num_gpus=N)`` on a CPU box), which is how
the embedded default and CI exercise the scheduling without a GPU.

The actor never imports torch: the job runs in ``python -m specpilot.workers.evaluate``, so
a crash, an out-of-memory kill or a hang costs one subprocess and is reported as a trial state
(``crashed``, ``timeout``), and the worker goes on. A worker *node* dying surfaces in the driver
as an actor error; the driver records that attempt and re-runs the job elsewhere.
"""

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ACCELERATOR_TYPES = {"h100": "H100", "h200": "H200", "b200": "B200", "rtxpro6000": "RTX-PRO-6000"}
"""Setting ``gpu`` -> Ray accelerator type (``ray.util.accelerators`` names)."""


def worker_resources(gpu: str) -> dict:
    """Ray actor options that route a worker to one GPU of the setting's SKU."""
    options = {"num_gpus": 1, "num_cpus": 0}
    if gpu in ACCELERATOR_TYPES:
        options["resources"] = {f"accelerator_type:{ACCELERATOR_TYPES[gpu]}": 0.001}
    return options


try:  # looked up once here: after fork, in a threaded worker, nothing may load a library
    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent(parent_pid: int):
    """``preexec_fn`` of the evaluation subprocess: be killed when the worker dies, so a killed
    worker leaves no orphan holding its GPU (Linux; elsewhere a no-op)."""
    def arm() -> None:
        if _PRCTL is not None:
            _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
            if os.getppid() != parent_pid:  # the worker died before the call
                os._exit(1)
    return arm


def _tail(text: str, limit: int = 3000) -> str:
    return text[-limit:] if text else ""


class Worker:
    """The body of the Ray actor (kept a plain class so it can run without Ray)."""

    def __init__(self, env: dict | None = None):
        self.env = dict(env or {})

    def describe(self) -> dict:
        """Where this worker runs: node, host, pid and the device(s) Ray assigned."""
        info = {"host": socket.gethostname(), "pid": os.getpid(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
        try:
            import ray

            context = ray.get_runtime_context()
            info["node_id"] = context.get_node_id()
            info["gpu_ids"] = [str(g) for g in context.get_accelerator_ids().get("GPU", [])]
        except Exception:  # noqa: BLE001 - outside Ray there is no runtime context
            info["node_id"], info["gpu_ids"] = None, []
        return info

    def run(self, job: dict, timeout_s: float) -> dict:
        """Run ``job`` in a subprocess; the result dict always has a ``state``."""
        where = self.describe()
        where["started_unix"] = time.time()  # the whole attempt, process start included
        env = {**os.environ, **self.env, **job.get("env", {})}
        with tempfile.TemporaryDirectory(prefix="specpilot-job-") as tmp:
            job_path, result_path = Path(tmp) / "job.json", Path(tmp) / "result.json"
            job_path.write_text(json.dumps(job))
            start = time.monotonic()
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "specpilot.workers.evaluate", str(job_path),
                     str(result_path)], env=env, capture_output=True, text=True,
                    timeout=timeout_s, preexec_fn=_die_with_parent(os.getpid()))
            except subprocess.TimeoutExpired as err:
                return {"state": "timeout", "error": f"no result after {timeout_s:g} s",
                        "stderr": _tail(err.stderr.decode() if isinstance(err.stderr, bytes)
                                        else err.stderr or ""), "worker": where,
                        "elapsed_s": time.monotonic() - start}
            if proc.returncode != 0 or not result_path.is_file():
                return {"state": "crashed", "error": f"evaluation process exited with "
                        f"{proc.returncode}", "stderr": _tail(proc.stderr), "worker": where,
                        "elapsed_s": time.monotonic() - start}
            result = json.loads(result_path.read_text())
        where["ended_unix"] = time.time()
        result["worker"] = where
        return result


def remote_worker_class():
    """``Worker`` as a Ray actor class: no restarts (the driver retries at trial level); two
    concurrent calls so ``describe`` answers while ``run`` is busy."""
    import ray

    return ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=2)(Worker)


class WorkerPool:
    """``size`` GPU workers for one setting; dead ones are dropped and, if possible, replaced.

    Each worker's device -- (node id, Ray GPU ids) -- is learned once it is placed, without
    blocking: a worker still waiting for a free GPU has none yet and gets no job."""

    def __init__(self, gpu: str, size: int, env: dict | None = None):
        import ray

        self.gpu, self.size, self.env = gpu, size, env or {}
        self._cls = remote_worker_class()
        self.options = worker_resources(gpu)
        self.workers = []
        self._where: dict[str, object] = {}  # actor id -> describe() ref, then its device
        self._check_capacity(ray)
        for _ in range(size):
            self.workers.append(self._spawn())

    def device_of(self, worker) -> tuple | None:
        """(node id, GPU ids) of ``worker`` once placed, else None (never blocks)."""
        import ray

        key = worker._actor_id.hex()
        known = self._where.get(key)
        if known is None or known == "dead" or isinstance(known, tuple):
            return None if known == "dead" else known
        ready, _ = ray.wait([known], timeout=0)
        if not ready:
            return None
        try:
            info = ray.get(ready[0])
        except Exception:  # noqa: BLE001 - died before it was placed: it has no device
            self._where[key] = "dead"
            return None
        self._where[key] = (info.get("node_id"), tuple(info.get("gpu_ids") or ()))
        return self._where[key]

    def died_unplaced(self, worker) -> bool:
        """True when ``worker`` died before it ever got a GPU (it will never take a job)."""
        self.device_of(worker)
        return self._where.get(worker._actor_id.hex()) == "dead"

    def devices(self) -> set:
        """The devices of the live workers placed so far."""
        return {d for d in map(self.device_of, self.workers) if d is not None}

    def _check_capacity(self, ray) -> None:
        from specpilot.errors import SpecPilotError

        total = ray.cluster_resources()
        need = {"GPU": 1.0, **{k: v for k, v in self.options.get("resources", {}).items()}}
        missing = [k for k, v in need.items() if total.get(k, 0.0) < v]
        if missing:
            raise SpecPilotError(
                f"the Ray cluster has no resource {missing} for a {self.gpu} worker (cluster: "
                f"{ {k: v for k, v in total.items() if not k.startswith('node:')} }); start it "
                f"with GPUs of that type (on a CPU box: ray start --head --num-gpus N)")

    def _spawn(self):
        worker = self._cls.options(**self.options).remote(self.env)
        self._where[worker._actor_id.hex()] = worker.describe.remote()
        return worker

    def close(self) -> None:
        """Kill every worker: their GPUs go back to the cluster (a driver process may run several
        campaigns; each pool holds its GPUs only while its campaign runs)."""
        for worker in self.workers:
            _kill(worker)
        self.workers = []

    def replace(self, dead) -> None:
        """Drop ``dead`` (killed, in case it only went silent: its GPU comes back) and start a
        replacement (it waits for a free GPU, wherever one is)."""
        _kill(dead)
        self.workers = [w for w in self.workers if w is not dead]
        self.workers.append(self._spawn())


def _kill(worker) -> None:
    """End a worker actor (no restart); one that is already dead is fine."""
    import ray

    try:
        ray.kill(worker, no_restart=True)
    except Exception:  # noqa: BLE001 - already dead
        pass
