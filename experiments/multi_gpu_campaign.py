"""One campaign across every GPU of a host: Ray, one worker per GPU (issue 11).

Writes $OUT/multi_gpu.json (partial results after every phase):
1. ``scaling``: the same campaign config (one round on SETTING: measure the champion, agents'
   proposals, every candidate built -> token-forced -> A/B'd on a worker) run with one worker per
   GPU and then with 1 worker, each in its own store so neither resumes the other. Throughput =
   candidate trials finished / wall seconds of the candidate stage (first dispatch to last result),
   per hour; the device (Ray GPU id, CUDA_VISIBLE_DEVICES, GPU UUID) of every trial is recorded
   and checked: no GPU ran two trials at once.
2. ``kill``: one worker per GPU; the worker running the first candidate is killed (``ray.kill``)
   mid-trial; the trial must be re-run on another GPU and MLflow must hold one finished run and
   one KILLED run for it.

NVLink multicast stays off in every process (the driver passes the variables to the workers).
Run from outside the checkout with the package, Ray, MLflow and Optuna importable:
    python3 experiments/multi_gpu_campaign.py [SETTING] [--candidates-per-agent N]
A CPU setting (cpu_c1_tiny) runs the same code on logical GPUs as a smoke test.
"""

import argparse
import json
import os
import threading
import time
from pathlib import Path

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def start_ray(num_gpus: int | None, cpu: bool) -> dict:
    import ray

    kwargs = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
              "runtime_env": {"env_vars": dict(MULTICAST_OFF)}}
    if cpu:
        kwargs["num_gpus"] = num_gpus or 2  # logical GPUs on a CPU box
    ray.init(**kwargs)
    resources = ray.cluster_resources()
    if not cpu and not any(k.startswith("accelerator_type:") for k in resources):
        import torch  # Ray did not name the GPU type: label the node the way Ray would

        name = torch.cuda.get_device_name(0).split()[-1]
        ray.shutdown()
        ray.init(**kwargs, resources={f"accelerator_type:{name}": 1.0})
        resources = ray.cluster_resources()
    return {k: v for k, v in resources.items() if not k.startswith("node:")}


def make_campaign(setting: str, workers: int, store: Path, per_agent: int, gpu: bool,
                  agents=("catalog", "mutation")):
    from specpilot.search.config import CampaignConfig
    from specpilot.search.driver import Campaign

    config = CampaignConfig(
        setting=setting, rounds=1, agents=agents, proposals_per_agent=per_agent, canary=False,
        num_workers=workers, kernel_trials=0, priors=False, campaign_dir=str(store),
        validation_prompts=2 if gpu else 1, validation_tokens=32 if gpu else 12,
        bench_prompts=2, bench_tokens=64 if gpu else 12, compare_budget_s=40.0 if gpu else 4.0,
        compare_max_rounds=6, trial_timeout_s=420.0 if gpu else 300.0)
    return Campaign(config, log=lambda *a: print(*a, flush=True))


def candidate_stage(campaign) -> dict:
    """Wrap ``evaluate`` to time the candidate stage and keep each trial's device and times."""
    stage = {"calls": []}
    evaluate = campaign.evaluate

    def timed(champion, proposals, round_, kind="candidate"):
        start = time.monotonic()
        outcomes = evaluate(champion, proposals, round_, kind)
        stage["calls"].append({"kind": kind, "n": len(proposals),
                               "wall_s": time.monotonic() - start})
        return outcomes

    campaign.evaluate = timed
    starts = {}

    def on_start(job, worker):
        starts[job.key] = (time.time(), worker._actor_id.hex())

    campaign.on_job_start = on_start
    stage["starts"] = starts
    return stage


def trials(campaign, starts: dict) -> list[dict]:
    rows = []
    for result_key, result in campaign.done.items():
        worker = result.get("worker") or {}
        device = result.get("device") or {}
        # the worker's own clock brackets the whole attempt (process start included); older
        # records only have the driver's dispatch time + the subprocess's elapsed_s
        started = worker.get("started_unix") or starts.get(result_key, (None, None))[0]
        rows.append({"key": result_key, "state": result.get("state"),
                     "mechanism": next((e["mechanism"] for e in campaign.evaluated
                                        if e["key"] == result_key), None),
                     "attempt": result.get("attempt"), "gpu_ids": worker.get("gpu_ids"),
                     "cuda_visible_devices": device.get("cuda_visible_devices"),
                     "uuid": device.get("uuid"), "elapsed_s": result.get("elapsed_s"),
                     "start_unix": started,
                     "end_unix": worker.get("ended_unix") or (
                         started + result["elapsed_s"] if started and result.get("elapsed_s")
                         else None)})
    return rows


def overlapping_on_one_gpu(rows: list[dict]) -> list:
    """Pairs of trials that ran on the same GPU at the same time (must be none)."""
    clashes = []
    timed = [r for r in rows if r["start_unix"] and r["end_unix"]]
    for i, a in enumerate(timed):
        for b in timed[i + 1:]:
            same = (a["uuid"] and a["uuid"] == b["uuid"]) or \
                   (not a["uuid"] and a["gpu_ids"] == b["gpu_ids"])
            if same and a["start_unix"] < b["end_unix"] and b["start_unix"] < a["end_unix"]:
                clashes.append((a["mechanism"], b["mechanism"]))
    return clashes


def scaling_run(setting, workers, root, per_agent, gpu) -> dict:
    campaign = make_campaign(setting, workers, root / f"scaling-{workers}", per_agent, gpu)
    stage = candidate_stage(campaign)
    start = time.monotonic()
    summary = campaign.run()
    wall = time.monotonic() - start
    candidate_calls = [c for c in stage["calls"] if c["kind"] == "candidate"]
    n = sum(c["n"] for c in candidate_calls)
    stage_s = sum(c["wall_s"] for c in candidate_calls)
    rows = trials(campaign, stage["starts"])
    return {"workers": workers, "candidates": n, "candidate_stage_s": stage_s,
            "candidates_per_hour": 3600.0 * n / stage_s if stage_s else None,
            "campaign_wall_s": wall, "trials": rows, "gpu_clashes": overlapping_on_one_gpu(rows),
            "devices_used": sorted({r["uuid"] or str(r["gpu_ids"]) for r in rows}),
            "stop_reason": summary["stop_reason"], "champion": summary["champion"]["name"]}


def kill_run(setting, workers, root, gpu, kill_after_s: float) -> dict:
    import ray

    from specpilot.recipe import STOCK
    from specpilot.search.agents import Proposal

    campaign = make_campaign(setting, workers, root / "kill", 1, gpu, agents=("mutation",))
    campaign._tried = set()
    killed = {}

    def kill_later(worker):
        time.sleep(kill_after_s)  # the evaluation subprocess is building / forcing by now
        killed["device"] = campaign.pool.device_of(worker)
        killed["actor"] = worker._actor_id.hex()
        ray.kill(worker, no_restart=True)

    def on_start(job, worker):
        if not killed.get("started"):
            killed["started"], killed["key"] = True, job.key
            threading.Thread(target=kill_later, args=(worker,), daemon=True).start()

    campaign.on_job_start = on_start
    proposal = Proposal("mutation", "block-size-4", {"block_size": 4}, "kill test")
    try:
        (_, result), = campaign.evaluate(STOCK, [proposal], 1)
    finally:
        campaign.close()
    runs = campaign.records.client.search_runs(
        [campaign.records.experiment_id], f"tags.trial_key = '{killed.get('key')}'")
    statuses = sorted(r.info.status for r in runs)
    rerun_device = (result.get("worker") or {}).get("gpu_ids")
    return {"killed_device": killed.get("device"), "killed_actor": killed.get("actor"),
            "rerun_gpu_ids": rerun_device, "rerun_uuid": (result.get("device") or {}).get("uuid"),
            "rerun_state": result.get("state"), "attempt": result.get("attempt"),
            "mlflow_statuses": statuses,
            "rerun_on_another_gpu": killed.get("device") is not None and
            tuple(rerun_device or ()) != tuple(killed["device"][1]),
            "one_finished_run": statuses.count("FINISHED") == 1 and "KILLED" in statuses}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("setting", nargs="?", default="h200_c1_qwen38-27b_dflash2")
    parser.add_argument("--candidates-per-agent", type=int, default=2)
    parser.add_argument("--kill-after-s", type=float, default=12.0)
    parser.add_argument("--deadline-s", type=float, default=560.0)
    parser.add_argument("--root", default="/tmp/multi_gpu")
    args = parser.parse_args()
    began = time.monotonic()
    gpu = not args.setting.startswith("cpu")
    OUT.mkdir(parents=True, exist_ok=True)
    root = Path(args.root)
    out = {"setting": args.setting, "multicast_off": {k: os.environ.get(k) for k in MULTICAST_OFF}}
    out["cluster"] = start_ray(None, not gpu)
    num_gpus = int(out["cluster"].get("GPU", 0))
    out["num_gpus"] = num_gpus

    def save():
        (OUT / "multi_gpu.json").write_text(json.dumps(out, indent=1, default=str))

    # all GPUs first: the 1-GPU run then finds the compile caches (Triton, Inductor) warm, so the
    # scaling measured is, if anything, an underestimate
    out["scaling"] = []
    for workers in (num_gpus, 1):
        out["scaling"].append(scaling_run(args.setting, workers, root,
                                          args.candidates_per_agent, gpu))
        save()
    many, one = out["scaling"]
    if one["candidates_per_hour"] and many["candidates_per_hour"]:
        speedup = many["candidates_per_hour"] / one["candidates_per_hour"]
        out["scaling_efficiency"] = speedup / num_gpus
        out["scaling_speedup"] = speedup
    save()
    if time.monotonic() - began < args.deadline_s - 150:
        out["kill"] = kill_run(args.setting, num_gpus, root, gpu, args.kill_after_s)
    else:
        out["kill"] = {"skipped": "too little time left in this call"}
    out["wall_s"] = time.monotonic() - began
    from specpilot.fingerprint import current

    out["fingerprint"] = current("cuda" if gpu else "cpu").to_dict()
    save()
    print(json.dumps({k: out[k] for k in ("num_gpus", "scaling_efficiency", "scaling_speedup",
                                          "kill") if k in out}, indent=1, default=str))


if __name__ == "__main__":
    main()
