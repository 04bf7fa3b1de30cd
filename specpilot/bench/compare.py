"""Interleaved A/B speed comparison on the same device and prompts (DESIGN.md §5).

Both engines are warmed up, then run in rounds over the prompts. Within a round each prompt is run
by A and by B back to back, alternating the order (AB, BA, AB, ... shifted every round), so drift
(clocks, thermals, a noisy neighbour) hits both sides alike. Each pair gives one ratio
``A_time / B_time`` of decode ms/token (> 1: B is faster). With replayed acceptance both sides of a
pair draw the same acceptance sequence (same plan seed). The run stops when the bootstrap 95% CI of
the median ratio is narrow enough, when the time budget is spent, or after ``max_rounds``.
"""

import dataclasses
import time

from specpilot.bench.runner import run_prompt
from specpilot.bench.runner import warm_up
from specpilot.bench.stats import StoppingRule
from specpilot.bench.stats import estimate_speedup
from specpilot.bench.stats import paired_ratios
from specpilot.errors import SpecPilotError

SPEEDUP_DEFINITION = "A_time / B_time per prompt (decode ms/token); > 1 means B is faster"


def _ms_per_token(measurement: dict, side: str) -> float:
    if measurement["ms_per_token"] is None:
        raise SpecPilotError(f"engine {side} stopped after one token on prompt "
                             f"{measurement['prompt_index']}; compare with --ignore-eos")
    return measurement["ms_per_token"]


def _result(pairs: list[dict], seed: int, **fields) -> dict:
    ratios = [p["ratio"] for p in pairs]
    estimate = estimate_speedup(ratios, seed=seed)
    return {"kind": "compare", **fields, "speedup_definition": SPEEDUP_DEFINITION,
            "pairs": pairs, "ratios": ratios, "median_speedup": estimate.median_speedup,
            "ci95": list(estimate.ci95), "half_width": estimate.half_width}


def compare_engines(engine_a, engine_b, workload, rule: StoppingRule = StoppingRule(),
                    replay=None, seed: int = 0, warmup: bool = True, progress=None) -> dict:
    """Interleaved A/B over ``workload``; returns the compare body of a record.

    Args:
        engine_a, engine_b: two ``Engine`` objects (typically sharing weights).
        workload: the ``Workload`` both run.
        rule: when to stop (CI half-width target, time budget, round limits).
        replay: a ``Replay`` for replayed acceptance, or None (measured).
        seed: seed of the bootstrap (replay plans are seeded by round and prompt).
        warmup: warm both engines up first.
        progress: optional ``advance()`` callable, called once per pair.
    """
    warmup_s = None
    if warmup:
        warmup_s = {"a": warm_up(engine_a, workload, replay),
                    "b": warm_up(engine_b, workload, replay)}
    engines = {"A": engine_a, "B": engine_b}
    pairs, num_rounds, stop_reason = [], 0, None
    start = time.monotonic()
    while stop_reason is None:
        for i in range(len(workload.prompts)):
            order = "AB" if (num_rounds + i) % 2 == 0 else "BA"
            plan_seed = num_rounds * 100_003 + i  # the same acceptance draws for A and B
            measured = {side: run_prompt(engines[side], workload, i, replay, seed=plan_seed)
                        for side in order}
            a_ms, b_ms = _ms_per_token(measured["A"], "A"), _ms_per_token(measured["B"], "B")
            pairs.append({"round": num_rounds, "prompt_index": i, "order": order,
                          "a_ms_per_token": a_ms, "b_ms_per_token": b_ms,
                          "a_tau": measured["A"]["tau"], "b_tau": measured["B"]["tau"],
                          "ratio": paired_ratios([a_ms], [b_ms])[0]})
            if progress is not None:
                progress()
            if rule.out_of_time(time.monotonic() - start):
                stop_reason = "time_budget"
                break
        else:
            num_rounds += 1
            estimate = estimate_speedup([p["ratio"] for p in pairs], seed=seed)
            stop_reason = rule.after_round(num_rounds, estimate)
    acceptance = replay.label if replay is not None else "measured"
    return _result(pairs, seed, scenario="c1", acceptance=acceptance, warmup_s=warmup_s,
                   prompts=workload.to_dict(), num_rounds=num_rounds, stop_reason=stop_reason,
                   elapsed_s=time.monotonic() - start, rule=dataclasses.asdict(rule))


def _side(record: dict) -> dict:
    return {k: record.get(k) for k in ("engine", "recipe_hash", "acceptance", "run_id")}


def compare_saved(record_a: dict, record_b: dict, seed: int = 0) -> dict:
    """Paired comparison of two saved bench records of the same prompts (not interleaved).

    Pairs are matched by prompt index; the result notes whether both ran on the same device, since
    runs taken at different times are exposed to drift that interleaving would cancel.
    """
    for name, record in (("A", record_a), ("B", record_b)):
        if record.get("kind") != "bench" or "per_prompt" not in record:
            raise SpecPilotError(f"{name} is not a bench record (kind={record.get('kind')!r})")
    if record_a["prompts"].get("hash") != record_b["prompts"].get("hash"):
        raise SpecPilotError("the two runs used different prompts; a paired comparison needs the "
                             "same prompts (same setting, dataset, count and tokenizer)")
    b_by_index = {p["prompt_index"]: p for p in record_b["per_prompt"]}
    pairs = []
    for a in record_a["per_prompt"]:
        b = b_by_index.get(a["prompt_index"])
        if b is None:
            continue
        a_ms, b_ms = _ms_per_token(a, "A"), _ms_per_token(b, "B")
        pairs.append({"round": 0, "prompt_index": a["prompt_index"], "order": "saved",
                      "a_ms_per_token": a_ms, "b_ms_per_token": b_ms, "a_tau": a["tau"],
                      "b_tau": b["tau"], "ratio": paired_ratios([a_ms], [b_ms])[0]})
    if not pairs:
        raise SpecPilotError("the two runs share no prompt")
    keys = ("gpu", "compute_capability", "driver", "cuda", "torch")
    fp_a, fp_b = record_a["fingerprint"], record_b["fingerprint"]
    same_device = all(fp_a.get(k) == fp_b.get(k) for k in keys)
    return _result(pairs, seed, scenario=record_a.get("scenario"), a=_side(record_a),
                   b=_side(record_b), acceptance=record_b.get("acceptance"),
                   prompts=record_a["prompts"], num_rounds=1, stop_reason="saved_runs",
                   same_device=same_device, interleaved=False)
