"""The evaluation entrypoint a worker runs in a fresh subprocess, one job per process.

``python -m specpilot.workers.evaluate JOB.json RESULT.json`` reads a job, writes its result
and exits 0; a crash, an out-of-memory kill or a hang is seen by the caller as a missing result
file, so a bad candidate can never take the worker (or the driver) down with it. It runs without
Ray too: on a GPU box with no Ray, run it directly on a job file.

Job kinds:
- ``measure``: the champion's decode ms/token, tau and per-phase ms/step (the gap table's input).
- ``candidate``: build -> token forcing against the AR reference (must pass) -> interleaved A/B
  against the champion on this device (one request: per-prompt ms/token; a batch scenario:
  throughput under continuous batching at the setting's concurrency) -> the candidate's phases. ``fault`` builds one of the
  deliberately broken engines instead (the campaign's canary: the gate must reject it).
- ``kernel``: check-then-time Triton kernel configs for one shape (the kernel sub-agent's trials),
  and ``kernel_survey``: time the current config of each shape (which kernel is farthest from its
  ceiling).
"""

import json
import os
import sys
import time
import traceback
from pathlib import Path


_LOADED: dict = {}
"""Models loaded by this process, by setting: several jobs in one process share the weights."""
_TWINS: dict = {}
"""Validation twins loaded by this process, by (setting, whether the engine's dtype is kept):
cleared with ``_LOADED`` (``specpilot.validation.twin``)."""


def _models(setting_name: str, speculative: bool = True):
    from specpilot.build import load_models
    from specpilot.settings import load_setting

    cached = _LOADED.get(setting_name)
    if cached is not None and (cached.drafter is not None or not speculative):
        return cached
    _LOADED.clear()  # one setting's weights at a time (two seed-scale targets do not fit)
    _TWINS.clear()
    _LOADED[setting_name] = load_models(load_setting(setting_name), with_drafter=speculative)
    return _LOADED[setting_name]


def _validation_models(models, recipe):
    """What ``recipe`` of ``models``' setting is token-forced on: the same models, or the
    setting's validation twin (a depth-cut float32 copy of random seed-scale weights; in the
    engine's dtype for a recipe with bf16-only kernels)."""
    from specpilot.validation.twin import needs_engine_dtype
    from specpilot.validation.twin import twin_of

    key = (models.setting.name, needs_engine_dtype(recipe))
    if key not in _TWINS:
        _TWINS[key] = twin_of(models, recipe)
    return _TWINS[key]


def _engine(models, recipe_dict: dict, fault: str | None = None):
    from specpilot.recipe import Recipe

    recipe = Recipe.from_dict(recipe_dict)
    if fault is None:
        return models.engine(recipe)
    from specpilot.validation.broken import BROKEN_ENGINES

    if fault not in BROKEN_ENGINES:
        raise ValueError(f"unknown fault {fault!r}; known: {sorted(BROKEN_ENGINES)}")
    return BROKEN_ENGINES[fault](models.target, models.drafter, recipe,
                                 max_len=models.setting.engine.max_len)


def _workload(models, job: dict, min_prompts: int = 1):
    from specpilot.bench import workload_for

    bench = job.get("bench", {})
    num_prompts = bench.get("num_prompts") or models.setting.scenario.num_prompts
    return workload_for(models.setting, models.tokenizer,
                        num_prompts=max(num_prompts, min_prompts),
                        max_new_tokens=bench.get("max_new_tokens"))


def _replay(models, workload, speculative: bool):
    from specpilot.bench import replay_for

    if not speculative or not models.setting.scenario.acceptance_profile:
        return None
    return replay_for(models, workload)


def measure(job: dict) -> dict:
    from specpilot.bench import bench_engine
    from specpilot.costmodel import measure_launch_us

    recipe = job["recipe"]
    models = _models(job["setting"], recipe.get("speculative", True))
    engine = _engine(models, recipe)
    workload = _workload(models, job)
    replay = _replay(models, workload, engine.drafter is not None)
    body = bench_engine(engine, workload, replay)
    summary = body["summary"]
    ar_ms = None
    if job.get("calibrate", True):  # the AR step of the same build calibrates the cost model
        from specpilot.bench.runner import measure_phases
        from specpilot.recipe import AR

        ar_engine = models.engine(AR.replace(**{k: v for k, v in recipe.items()
                                                if k in ("gemm", "cuda_graphs",
                                                         "fused_elementwise")}))
        ar_ms = measure_phases(ar_engine, workload)["ms_per_step"].get("verify")
    return {"ar_ms_per_step": ar_ms, "fixed_ms": _fixed_ms(models, engine) if ar_ms else None,
            "ms_per_token": summary.get("ms_per_token", {}).get("median")
            if isinstance(summary.get("ms_per_token"), dict) else summary.get("ms_per_token"),
            "tau": summary.get("tau"), "phases_ms": summary["phases"]["ms_per_step"],
            "acceptance": body["acceptance"], "block_size": engine.block_size,
            "launch_us": measure_launch_us(engine.device)}  # the gap table's per-kernel cost


def _fixed_ms(models, engine) -> dict | None:
    """Each phase's fixed cost on this GPU: the same build on shrunk models (the gap table's
    prediction adds it to the bandwidth-bound time). None off CUDA, where it would time Python."""
    if engine.device.type != "cuda":
        return None
    from specpilot.costmodel.fixed import measure_fixed_ms
    from specpilot.search.catalog import model_configs

    target, drafter = model_configs(models.setting)
    return measure_fixed_ms(target, drafter if engine.drafter is not None else None,
                            engine.recipe, engine.device, engine.target.lm_head.weight.dtype,
                            max_len=engine.max_len)


def candidate(job: dict) -> dict:
    from specpilot.bench import StoppingRule
    from specpilot.bench import compare_engines
    from specpilot.bench.runner import measure_phases
    from specpilot.engines.engine import SamplingParams
    from specpilot.recipe import AR
    from specpilot.datasets import load_prompts
    from specpilot.validation import validate_engine
    from specpilot.validation.twin import strict_float32

    models = _models(job["setting"])
    setting = models.setting
    start = time.monotonic()
    engine = _engine(models, job["recipe"], job.get("fault"))
    twin = _validation_models(models, engine.recipe)  # token forcing's; speed runs on `models`
    forced = engine if twin is models else _engine(twin, job["recipe"], job.get("fault"))
    val = setting.validation
    spec = job.get("validation", {})
    texts = load_prompts(val.dataset, spec.get("num_prompts") or val.num_prompts)
    prompts = [twin.tokenizer.encode(t).ids for t in texts]
    params = SamplingParams(max_new_tokens=spec.get("max_new_tokens") or val.max_new_tokens)
    with strict_float32(twin.setting.engine.dtype == "float32"):
        report = validate_engine(twin.engine(AR), forced, prompts, params, epsilon=val.epsilon,
                                 max_mismatch_rate=val.max_mismatch_rate,
                                 num_canaries=val.num_canaries, seed=job.get("seed", 0),
                                 name=job.get("name", "candidate"),
                                 concurrency=setting.scenario.concurrency)
    validation = {k: v for k, v in report.to_dict().items() if k != "mismatches"}
    validation["mismatches"] = report.mismatches[:20]
    out = {"valid": report.passed, "validation": validation,
           "validation_s": time.monotonic() - start}
    if not report.passed:
        return out
    champion = _engine(models, job["champion"])
    bench = job.get("bench", {})
    concurrency = setting.scenario.concurrency
    workload = _workload(models, job, min_prompts=2 * concurrency if concurrency > 1 else 1)
    replay = _replay(models, workload, True)
    if concurrency > 1:  # a batch scenario: throughput under continuous batching decides
        out["compare"] = _throughput_compare(champion, engine, workload, replay, concurrency,
                                             bench)
        out["phases_ms"] = measure_phases(engine, workload, replay)["ms_per_step"]
        return out
    rule = StoppingRule(bench.get("half_width", 0.02), bench.get("budget_s", 120.0),
                        min(2, bench.get("max_rounds", 20)), bench.get("max_rounds", 20))
    body = compare_engines(champion, engine, workload, rule, replay, seed=job.get("seed", 0))
    out["compare"] = {k: body[k] for k in ("median_speedup", "ci95", "half_width", "num_rounds",
                                           "stop_reason", "acceptance", "ratios")}
    out["compare"]["champion_ms_per_token"] = _median([p["a_ms_per_token"] for p in body["pairs"]])
    out["compare"]["ms_per_token"] = _median([p["b_ms_per_token"] for p in body["pairs"]])
    out["compare"]["tau"] = _median([p["b_tau"] for p in body["pairs"] if p["b_tau"]])
    out["phases_ms"] = measure_phases(engine, workload, replay)["ms_per_step"]
    return out


def _throughput_compare(champion, engine, workload, replay, concurrency: int,
                        bench: dict) -> dict:
    """Candidate vs champion at ``concurrency`` requests in flight: ``max_rounds`` interleaved
    repetitions of the whole workload through the continuous-batching scheduler, one throughput
    ratio (candidate tok/s / champion tok/s) each, the median with a bootstrap CI."""
    from specpilot.bench.batched import compare_levels
    from specpilot.errors import SpecPilotError

    repeats = max(2, bench.get("max_rounds", 4))
    level, = compare_levels({"a": champion, "b": engine}, workload, [concurrency], repeats, replay,
                            {concurrency: len(workload.prompts)}, log=lambda _: None)
    if "error" in level:  # the candidate's batch does not fit: the trial fails with the reason
        raise SpecPilotError(level["error"])
    lo, hi = level["ci95"]
    return {"median_speedup": level["median_ratio"], "ci95": [lo, hi], "half_width": (hi - lo) / 2,
            "num_rounds": repeats, "stop_reason": "repeats", "scenario": f"c{concurrency}",
            "acceptance": replay.label if replay is not None else "measured",
            "ratios": level["ratios"], "champion_tok_s": level["a_tok_s"],
            "tok_s": level["b_tok_s"], "champion_p99_latency_s": level["a_p99_latency_s"],
            "p99_latency_s": level["b_p99_latency_s"], "tau": level["b_tau"]}


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def kernel(job: dict) -> dict:
    """Check then time each config of ``job['configs']`` for one op and shape. On a GPU (or with
    ``isolate``) each config runs in a child process killed after ``config_timeout_s``: a config
    that hangs the device is reported ``timeout`` and the others still get their results."""
    from specpilot.kernels.tuning.isolate import CaseSpec
    from specpilot.kernels.tuning.isolate import trial_runner
    from specpilot.kernels.tuning.ops import space_of

    space = space_of(job["op"])
    m, n, k = job["m"], job["n"], job["k"]
    spec = CaseSpec(job["op"], m, n, k, job["device"], job.get("seed", 0), 1)
    results = []
    with trial_runner(spec, job.get("reps", 20), job.get("isolate"),
                      job.get("config_timeout_s", 120.0)) as runner:
        for config in job["configs"]:
            try:
                space.validate(config, m, n, k)
            except ValueError as err:
                results.append({"state": "invalid", "detail": str(err)})
                continue
            state, timing, detail = runner.evaluate(config)
            results.append({"state": state, "detail": detail,
                            "timing": timing.to_dict() if timing is not None else None})
        traffic = runner.traffic
    return {"results": results, "traffic_bytes": traffic.bytes_moved}


def kernel_survey(job: dict) -> dict:
    """p50 time of each weight's current config on its op (``job['gemms']``: ``[op, N, K]``): the
    tuned cache's, else the space's default, which is what the engine launches."""
    import torch

    from specpilot.kernels.common.launch import num_sms
    from specpilot.kernels.tuning import cache
    from specpilot.kernels.tuning.ops import get_op
    from specpilot.kernels.tuning.study import evaluate as evaluate_config

    device = torch.device(job["device"])
    m = job["m"]
    rows = []
    for name, n, k in job["gemms"]:
        op = get_op(name)
        config = cache.lookup_config(name, m, n, k, device)
        if config is None:
            config = op.space.default_config(m, n, k, num_sms(device))
        if not _fits(op, config, m, n, k):
            continue
        case = op.make_case(m, n, k, device, 0, 1)
        state, timing, _ = evaluate_config(op, case, config, device, job.get("reps", 20))
        if state == "ok":
            rows.append({"op": name, "n": n, "k": k, "m": m, "config": config,
                         "p50_us": timing.p50_us, "traffic_bytes": case.traffic.bytes_moved})
    return {"rows": rows}


def _fits(op, config, m, n, k) -> bool:
    try:
        op.space.validate(config, m, n, k)
        return True
    except ValueError:
        return False


KINDS = {"measure": measure, "candidate": candidate, "kernel": kernel,
         "kernel_survey": kernel_survey}


def _device(device: str) -> dict:
    """Which device this job ran on (a campaign proves no GPU was shared by two workers)."""
    import torch

    out = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update({"name": props.name, "uuid": str(getattr(props, "uuid", "")),
                    "pci_bus_id": getattr(props, "pci_bus_id", None)})
    return out


def run_job(job: dict) -> dict:
    """Run one job in this process; exceptions become an ``error`` result (the trial failed)."""
    from specpilot.fingerprint import current

    kind = job.get("kind")
    if kind not in KINDS:
        return {"state": "error", "error": f"unknown job kind {kind!r}; known: {sorted(KINDS)}"}
    device = "cuda" if job.get("device", "cpu").startswith("cuda") else "cpu"
    start = time.monotonic()
    try:
        body = KINDS[kind](job)
        state = "ok"
        if kind == "candidate" and not body["valid"]:
            state = "invalid"
        return {"state": state, **body, "elapsed_s": time.monotonic() - start,
                "fingerprint": current(device).to_dict(), "device": _device(device)}
    except Exception as err:  # noqa: BLE001 - any failure of a candidate is a recorded trial state
        return {"state": "error", "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc()[-4000:], "elapsed_s": time.monotonic() - start}


def main(argv: list[str]) -> int:
    """``JOB RESULT [JOB RESULT ...]``: several pairs run in order in this process, sharing the
    loaded weights (a GPU box without Ray evaluates a whole round with one load)."""
    if not argv or len(argv) % 2:
        print("usage: python -m specpilot.workers.evaluate JOB.json RESULT.json [JOB RESULT ...]",
              file=sys.stderr)
        return 2
    for job_path, result_path in zip(argv[0::2], argv[1::2]):
        result = run_job(json.loads(Path(job_path).read_text()))
        tmp = Path(result_path).with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
