"""Single-request benchmark of one engine over a workload (DESIGN.md §5).

Order: a warm-up generation (kernel compile, autotune, CUDA-graph capture), then every prompt once.
Per prompt: decode time (the engine's own clock: after the first token, device synchronised),
end-to-end wall time, ms/token over the decoded tokens, tau and the accept length of every step.

Per-phase time (draft / verify / accept / commit / overhead) comes from a separate pass over the
first prompt with a :class:`~specpilot.engines.timing.PhaseTimer` (device events on CUDA, the host
clock on CPU): the timer synchronises once per step, so it never runs inside the timed prompts.
"""

import statistics
import time
from collections import Counter

from specpilot.bench.stats import percentile

WARMUP_MAX_NEW_TOKENS = 16

def _sync(engine) -> None:
    if engine.device.type == "cuda":
        import torch

        torch.cuda.synchronize(engine.device)


def warm_up(engine, workload, replay=None) -> float:
    """One short generation on the first prompt (compile, graph capture); returns wall seconds."""
    import dataclasses

    params = dataclasses.replace(workload.params,
                                 max_new_tokens=min(workload.params.max_new_tokens,
                                                    WARMUP_MAX_NEW_TOKENS))
    plan = replay.plan(engine, 0, seed=0) if replay is not None else None
    _sync(engine)
    start = time.perf_counter()
    engine.generate(list(workload.prompts[0]), params, replay=plan)
    _sync(engine)
    return time.perf_counter() - start


def run_prompt(engine, workload, prompt_index: int, replay=None, seed: int = 0) -> dict:
    """Generate one prompt and return its per-prompt measurements."""
    plan = replay.plan(engine, prompt_index, seed) if replay is not None else None
    _sync(engine)
    start = time.perf_counter()
    result = engine.generate(list(workload.prompts[prompt_index]), workload.params, replay=plan)
    e2e_s = time.perf_counter() - start
    num_decoded = len(result.tokens) - 1  # the first token comes from prefill, before decode_s
    return {
        "prompt_index": prompt_index,
        "tokens": len(result.tokens),
        "decode_s": result.decode_s,
        "e2e_s": e2e_s,
        "prefill_ms": (e2e_s - result.decode_s) * 1e3,
        "ms_per_token": result.decode_s * 1e3 / num_decoded if num_decoded > 0 else None,
        "tau": result.tau,
        "accept_lengths": list(result.accept_lengths),
        "finish_reason": result.finish_reason,
    }


def summarize(per_prompt: list[dict]) -> dict:
    """Throughput, ms/token (median, p20, p80 over prompts), tau and its histogram."""
    ms = [p["ms_per_token"] for p in per_prompt if p["ms_per_token"] is not None]
    decoded = sum(p["tokens"] - 1 for p in per_prompt)
    decode_s = sum(p["decode_s"] for p in per_prompt)
    steps = [n for p in per_prompt for n in p["accept_lengths"]]
    histogram = Counter(steps)
    return {
        "num_prompts": len(per_prompt),
        "num_tokens": sum(p["tokens"] for p in per_prompt),
        "tok_s": decoded / decode_s if decode_s > 0 else None,
        "e2e_tok_s": sum(p["tokens"] for p in per_prompt) / sum(p["e2e_s"] for p in per_prompt),
        "ms_per_token": {"median": statistics.median(ms), "p20": percentile(ms, 20),
                         "p80": percentile(ms, 80)} if ms else None,
        "prefill_ms_median": statistics.median(p["prefill_ms"] for p in per_prompt),
        "tau": sum(steps) / len(steps) if steps else None,
        "num_steps": len(steps),
        "tau_histogram": {str(k): histogram[k] for k in sorted(histogram)},
    }


def bench_engine(engine, workload, replay=None, warmup: bool = True, progress=None) -> dict:
    """Warm up, then run every prompt of ``workload`` once; returns the bench body of a record.

    Args:
        engine: an ``Engine`` (``Models.engine(recipe)``).
        workload: a ``Workload`` (prompts and sampling).
        replay: a ``Replay`` for replayed acceptance, or None (acceptance measured).
        warmup: run the warm-up generation first.
        progress: optional ``advance()`` callable, called once per prompt.
    """
    warmup_s = warm_up(engine, workload, replay) if warmup else None
    per_prompt = []
    for i in range(len(workload.prompts)):
        per_prompt.append(run_prompt(engine, workload, i, replay, seed=i))
        if progress is not None:
            progress()
    summary = summarize(per_prompt)
    summary["phases"] = measure_phases(engine, workload, replay)
    return {
        "scenario": "c1",
        "acceptance": replay.label if replay is not None and engine.drafter is not None
        else "measured",
        "warmup_s": warmup_s,
        "prompts": workload.to_dict(),
        "per_prompt": per_prompt,
        "summary": summary,
    }


def measure_phases(engine, workload, replay=None) -> dict:
    """Mean ms per decode step of each phase, from one timed pass over the first prompt."""
    from specpilot.engines.timing import PhaseTimer

    timer = PhaseTimer(engine.device)
    plan = replay.plan(engine, 0, seed=0) if replay is not None else None
    engine.generate(list(workload.prompts[0]), workload.params, replay=plan, timer=timer)
    return {"measured": True, "prompt_index": 0, "clock": "cuda events" if timer.cuda else "host",
            "ms_per_step": timer.ms_per_step()}
