"""Batched benchmark: throughput and per-request latency at each concurrency (``--scenario cN``).

Closed loop, as a serving benchmark with a fixed number of clients: ``concurrency`` client threads
each submit a prompt to the engine's scheduler (``specpilot.engines.scheduler``, continuous
batching with ``max_batch = concurrency``), wait for it to finish, and take the next prompt. Per
request: time to first token (prefill, from submission), end-to-end latency, inter-token gaps (a
step that keeps several tokens spreads its gap over them), tokens and accept lengths. Per level:
output tokens per second of wall time and the distributions of those latencies.
"""

import dataclasses
import threading
import time

from specpilot.bench.stats import percentile
from specpilot.errors import SpecPilotError


def distribution(values: list[float]) -> dict | None:
    """{median, p20, p80} of ``values``; None when there are none."""
    if not values:
        return None
    return {"median": percentile(values, 50), "p20": percentile(values, 20),
            "p80": percentile(values, 80)}


def summarize_level(concurrency: int, wall_s: float, per_prompt: list[dict]) -> dict:
    """One concurrency level: throughput, latency distributions, tau, and the requests."""
    num_tokens = sum(p["tokens"] for p in per_prompt)
    steps = [n for p in per_prompt for n in p["accept_lengths"]]
    taus = [p["tau"] for p in per_prompt if p["tau"] is not None]
    tau = sum(steps) / len(steps) if steps else (sum(taus) / len(taus) if taus else None)
    return {"concurrency": concurrency, "wall_s": wall_s, "num_tokens": num_tokens,
            "output_tok_s": num_tokens / wall_s,
            "request_latency_s": distribution([p["e2e_s"] for p in per_prompt]),
            "ttft_ms": distribution([p["ttft_ms"] for p in per_prompt]),
            "ms_per_token": distribution([p["ms_per_token"] for p in per_prompt
                                          if p["ms_per_token"] is not None]),
            "itl_ms": distribution([g for p in per_prompt for g in p["itl_ms"]]),
            "tau": tau, "per_prompt": per_prompt}


REQUEST_TIMEOUT_S = 3600.0
WARMUP_TOKENS = 16  # per warm-up request: a few decode steps at every batch size the waves pass


def _request(scheduler, request_id: str, prompt_ids: list[int], params,
             prompt_index: int, replay=None) -> dict:
    """Submit one request and wait for it; its measurements (the keys of a local bench prompt)."""
    done, arrivals, final = threading.Event(), [], []

    def on_event(event) -> None:
        if event.new_tokens:
            arrivals.append((time.perf_counter(), len(event.new_tokens)))
        if event.finished:
            final.append(event)
            done.set()

    start = time.perf_counter()
    try:
        scheduler.submit(request_id, prompt_ids, params, on_event, replay=replay)
    except ValueError as err:  # a request that can never run (too long, empty)
        raise SpecPilotError(f"request {request_id}: {err}") from err
    if not done.wait(timeout=REQUEST_TIMEOUT_S):
        scheduler.cancel(request_id)
        raise SpecPilotError(f"request {request_id} did not finish in {REQUEST_TIMEOUT_S} s")
    end = time.perf_counter()
    event = final[0]
    if event.error is not None or not arrivals:
        raise SpecPilotError(f"request {request_id} failed: {event.error or 'no tokens'}")
    gaps_ms = []
    for (t0, _), (t1, n) in zip(arrivals, arrivals[1:]):
        gaps_ms.extend([(t1 - t0) * 1e3 / n] * n)
    num_tokens = sum(n for _, n in arrivals)
    first_s, decode_s = arrivals[0][0] - start, arrivals[-1][0] - arrivals[0][0]
    accept_lengths = list(event.accept_lengths)
    return {"prompt_index": prompt_index, "tokens": num_tokens, "decode_s": decode_s,
            "e2e_s": end - start, "prefill_ms": first_s * 1e3, "ttft_ms": first_s * 1e3,
            "ms_per_token": decode_s * 1e3 / (num_tokens - 1) if num_tokens > 1 else None,
            "itl_ms": gaps_ms,
            "tau": sum(accept_lengths) / len(accept_lengths) if accept_lengths else None,
            "accept_lengths": accept_lengths, "finish_reason": event.finish_reason}


def bench_level(engine, workload, concurrency: int, warmup: bool = True, progress=None,
                replay=None, batch=None) -> dict:
    """All prompts of ``workload`` with ``concurrency`` clients; ``summarize_level``'s dict.

    ``replay``: a ``Replay`` for replayed acceptance (random-weight settings), else measured.
    ``batch``: an idle ``BatchEngine`` of ``engine`` with ``concurrency`` rows to reuse.
    """

    def plan(i):
        return replay.plan(engine, i, seed=i) if replay is not None else None

    from specpilot.engines.scheduler import Scheduler

    scheduler = Scheduler(engine, max_batch=concurrency, batch=batch)
    try:
        if warmup:  # two short closed-loop waves of `concurrency` requests, so that padded
            # prefills of several widths and the decode steps of every batch size compile, tune
            # their kernels and capture before the clock starts (one request warmed only one)
            count = min(concurrency, len(workload.prompts))
            short = dataclasses.replace(workload.params, max_new_tokens=min(
                WARMUP_TOKENS, workload.params.max_new_tokens))
            for shift in range(2):
                order = [(shift + j) % len(workload.prompts) for j in range(count)]
                _clients(scheduler, workload, order, short, plan, concurrency, "warmup")
        before = dataclasses.replace(scheduler.stats)
        start = time.perf_counter()
        results = _clients(scheduler, workload, list(range(len(workload.prompts))),
                           workload.params, plan, concurrency, "bench", progress)
        wall_s = time.perf_counter() - start
    finally:
        scheduler.shutdown()
    # decode steps and prefill rounds (admissions: each stalls every running row once), and where
    # the wall time went: steps, prefill rounds, the rest (host work between them, idle rows)
    stats = scheduler.stats
    step_s = stats.step_seconds_total - before.step_seconds_total
    admission_s = stats.admission_seconds_total - before.admission_seconds_total
    return {**summarize_level(concurrency, wall_s, [results[i] for i in sorted(results)]),
            "steps": stats.steps_total - before.steps_total,
            "admissions": stats.admissions_total - before.admissions_total,
            "wall_split_s": {"steps": step_s, "admissions": admission_s,
                             "other": wall_s - step_s - admission_s}}


def _clients(scheduler, workload, order: list[int], params, plan, concurrency: int, tag: str,
             progress=None) -> dict:
    """Closed loop: ``concurrency`` clients each send the next prompt of ``order`` when their last
    one finishes; {prompt index: its measurements}. The first error stops the clients and raises."""
    queue, lock, results, errors = list(order), threading.Lock(), {}, []

    def client() -> None:
        while not errors:
            with lock:
                if not queue:
                    return
                i = queue.pop(0)
            try:
                results[i] = _request(scheduler, f"{tag}-{i}", list(workload.prompts[i]), params,
                                      i, plan(i))
            except SpecPilotError as err:
                errors.append(err)
            if progress is not None:
                progress()

    clients = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    if errors:
        raise errors[0]
    return results


def compare_levels(engines: dict, workload, levels: list[int], repeats: int = 3, replay=None,
                   prompts_by_level: dict | None = None, log=print) -> list[dict]:
    """Throughput of engine ``b`` over engine ``a`` (``engines = {"a": .., "b": ..}``) at each
    concurrency, side by side: per level ``repeats`` interleaved A/B, B/A, .. runs of the same
    prompts, one throughput ratio (B tok/s / A tok/s) per repetition, the median with a bootstrap
    95% CI, and each engine's median p99 request latency. The first run of each engine per level
    is preceded by a warm-up request."""
    import dataclasses
    import statistics

    from specpilot.bench.stats import estimate_speedup
    from specpilot.engines.batch import BatchEngine
    from specpilot.engines.batch import release_memory

    device = next(iter(engines.values())).device
    out = []
    for concurrency in levels:
        # one batched engine per side and level: its caches and CUDA graphs serve every repetition
        try:
            batches = {}
            for side, engine in engines.items():  # the sides never step together: one scratch
                batches[side] = BatchEngine(engine, concurrency,
                                            share_scratch=next(iter(batches.values()), None))
        except SpecPilotError as err:  # a level that does not fit is a recorded outcome
            release_memory(device)
            log(f"c={concurrency}: not run: {err}")
            out.append({"concurrency": concurrency, "error": str(err)})
            continue
        n = (prompts_by_level or {}).get(concurrency, 2 * concurrency)
        sub = dataclasses.replace(workload, prompts=workload.prompts[:n],
                                  texts=workload.texts[:n])
        runs = {"a": [], "b": []}
        for rep in range(repeats):
            for side in (("a", "b") if rep % 2 == 0 else ("b", "a")):
                level = bench_level(engines[side], sub, concurrency, warmup=rep < 2,
                                    replay=replay, batch=batches[side])
                e2e = [p["e2e_s"] for p in level["per_prompt"]]
                runs[side].append({"output_tok_s": level["output_tok_s"],
                                   "wall_s": level["wall_s"], "tau": level["tau"],
                                   "p50_latency_s": percentile(e2e, 50),
                                   "p99_latency_s": percentile(e2e, 99),
                                   # prefill vs decode: the median time to first token and the
                                   # median gap between tokens after it
                                   "ttft_ms": (level["ttft_ms"] or {}).get("median"),
                                   "itl_ms": (level["itl_ms"] or {}).get("median"),
                                   "steps": level["steps"], "admissions": level["admissions"],
                                   "wall_split_s": level["wall_split_s"]})
        ratios = [b["output_tok_s"] / a["output_tok_s"] for a, b in zip(runs["a"], runs["b"])]
        estimate = estimate_speedup(ratios, seed=0)
        # the same ratio over the decode wall alone (steps and the host work between them,
        # admissions left out): both sides decode the same tokens, so a / b of that wall
        decode = [_decode_wall_s(a) / _decode_wall_s(b) for a, b in zip(runs["a"], runs["b"])]
        decode_estimate = estimate_speedup(decode, seed=0)
        entry = {"concurrency": concurrency, "num_prompts": len(sub.prompts), "runs": runs,
                 "ratios": ratios, "median_ratio": estimate.median_speedup,
                 "ci95": list(estimate.ci95), "decode_ratios": decode,
                 "decode_median_ratio": decode_estimate.median_speedup,
                 "decode_ci95": list(decode_estimate.ci95),
                 **{f"{side}_tok_s": statistics.median(r["output_tok_s"] for r in runs[side])
                    for side in runs},
                 **{f"{side}_p99_latency_s": statistics.median(r["p99_latency_s"]
                                                               for r in runs[side])
                    for side in runs},
                 "b_tau": statistics.median(r["tau"] for r in runs["b"])
                 if all(r["tau"] is not None for r in runs["b"]) else None}
        del batches
        release_memory(device)  # this level's caches and graphs go before the next level's
        log(f"c={concurrency}: b/a throughput {entry['median_ratio']:.3f}x "
            f"[{entry['ci95'][0]:.3f}, {entry['ci95'][1]:.3f}] (a {entry['a_tok_s']:.1f} tok/s, "
            f"b {entry['b_tok_s']:.1f} tok/s); decode wall alone "
            f"{entry['decode_median_ratio']:.3f}x [{entry['decode_ci95'][0]:.3f}, "
            f"{entry['decode_ci95'][1]:.3f}]")
        out.append(entry)
    return out


def _decode_wall_s(run: dict) -> float:
    """A run's wall time outside admissions (prefill rounds): its decode steps and the rest."""
    split = run["wall_split_s"]
    return split["steps"] + split["other"]
