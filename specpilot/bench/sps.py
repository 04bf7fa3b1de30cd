"""The confidence budget's steps-per-second table, measured on this GPU and engine.

``verify_budget='sps'`` prices a verify width ``w`` over a bucket of ``b`` rows by ``SPS(b * w)``,
the steps per second of a decode step that verifies ``b * w`` tokens (DSpark's table). This
measures it with the engine that will use it: a batch engine built with the budget (so each
(bucket, width) step is the captured graph the budget will replay) is filled with ``b`` requests
per bucket, and each of the bucket's widths is stepped with the width pinned
(``BatchEngine.step(width=...)``), in rounds whose order rotates, each timed run on fresh requests
(prefilled untimed, so every width runs at the same context) after a warm-up step. A step's time includes its draft, its verify and the host read
of its table (not the budget's own read of the confidences, which is the same at every width). The
table keeps every point with its bucket, ``(rows, tokens, steps/s)``: a padded step's rate depends
on its rows as well as on its verify tokens (on the H200 proxy pair, 32 tokens run at 414 steps/s
as 32 rows x 1 but at 336 as 16 rows x 2), so one table by tokens alone would misprice every bucket
but one. The budget's recipe turns overlapped scheduling and two stages off, which it excludes.
"""

import json
import statistics
import time
from pathlib import Path

import torch

from specpilot.errors import SpecPilotError

PLACEHOLDER_TABLE = ((1, 1.0),)  # the budget engine needs a table to be built; widths are pinned


def measure_sps_table(models, recipe, max_batch: int, rounds: int = 3, steps: int = 4,
                      prompt_tokens: int = 32, log=print) -> dict:
    """Steps/s of ``recipe``'s batched step at every (bucket, width) the budget may take, for a
    batch of up to ``max_batch`` rows: ``{"samples": [{bucket, width, tokens, steps_per_s,
    spread}], "sps_table": [[rows, tokens, steps_per_s], ..]}`` (medians over ``rounds`` runs of
    ``steps`` steps each)."""
    from specpilot.datasets import load_prompts
    from specpilot.engines.batch import BatchEngine
    from specpilot.engines.batch import Running
    from specpilot.engines.batch import release_memory
    from specpilot.engines.engine import SamplingParams

    if not recipe.speculative:
        raise SpecPilotError(f"recipe {recipe.name!r} drafts nothing: a steps/s table prices "
                             "verify widths, so it needs a speculative recipe")
    if rounds < 1 or steps < 1:
        raise SpecPilotError("a steps/s table needs rounds >= 1 and steps >= 1")
    engine = models.engine(budget_recipe(recipe, PLACEHOLDER_TABLE))
    batch = BatchEngine(engine, max_batch)
    texts = load_prompts("gsm8k", max_batch)
    prompts = [(models.tokenizer.encode(t).ids * prompt_tokens)[:prompt_tokens] for t in texts]
    samples = []
    try:
        for bucket in batch.buckets:
            widths = batch.budget_widths(bucket)
            # fresh requests for every timed run (prefilled untimed), so every width is timed at
            # the same context; each must outlast its steps, keeping up to a whole window each
            budget = (steps + 1) * max(widths) + 1  # + the prefill's token
            if prompt_tokens + budget > engine.context:
                raise SpecPilotError(
                    f"timing {steps + 1} steps of up to {max(widths)} tokens after a "
                    f"{prompt_tokens}-token prompt needs {prompt_tokens + budget} tokens per row; "
                    f"the engine holds {engine.context}: lower --steps")
            params = SamplingParams(max_new_tokens=budget, ignore_eos=True)
            rates = {w: [] for w in widths}
            for r in range(rounds):
                for w in widths[r % len(widths):] + widths[:r % len(widths)]:
                    requests = [Running(f"sps-{bucket}-{r}-{w}-{i}",
                                        list(prompts[i % len(prompts)]), params, set())
                                for i in range(bucket)]
                    for req, err in batch.add_many(requests):
                        raise err
                    batch.step(width=w)  # warm-up
                    _sync(engine.device)
                    started = time.perf_counter()
                    for _ in range(steps):
                        batch.step(width=w)
                    _sync(engine.device)
                    rates[w].append(steps / (time.perf_counter() - started))
                    for req in list(batch.running):
                        batch.remove(req)
            for w in widths:
                median = statistics.median(rates[w])
                samples.append({"bucket": bucket, "width": w, "tokens": bucket * w,
                                "steps_per_s": median,
                                "spread": [min(rates[w]), max(rates[w])]})
                log(f"bucket {bucket:3d} width {w:2d} ({bucket * w:4d} verify tokens): "
                    f"{median:8.1f} steps/s [{min(rates[w]):.1f}, {max(rates[w]):.1f}]")
    finally:
        del batch
        release_memory(engine.device)
    table = [[s["bucket"], s["tokens"], s["steps_per_s"]] for s in samples]
    return {"samples": samples, "sps_table": table}


def budget_recipe(base, sps_table, name: str | None = None):
    """``base`` with the confidence budget on ``sps_table`` (named ``name``); overlapped
    scheduling and two stages, which the budget excludes, are off."""
    return base.replace(name=name or base.name, verify_budget="sps",
                        sps_table=tuple(tuple(p) for p in sps_table), overlap_schedule=False,
                        two_stage=())


def save_budget_recipe(models, base, engine: str, max_batch: int, name: str | None = None,
                       rounds: int = 3, steps: int = 4, log=print) -> tuple[Path, dict]:
    """Measure ``base``'s table (:func:`measure_sps_table`), write :func:`budget_recipe` as
    ``recipes/NAME.json`` (default ``ENGINE-budget``) of the models' setting, and return its path
    and the measurement's record (kind ``sps_table``, with the fingerprint)."""
    from specpilot import fingerprint

    started = time.time()
    measured = measure_sps_table(models, base, max_batch, rounds=rounds, steps=steps, log=log)
    name = name or f"{engine.replace('+', '-')}-budget"
    setting = models.setting
    path = setting.directory / "recipes" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(budget_recipe(base, measured["sps_table"], name).to_dict(),
                               indent=1) + "\n")
    return path, {"kind": "sps_table", "timestamp": started, "setting": setting.name,
                  "engine": engine, "recipe": name, "max_batch": max_batch, "rounds": rounds,
                  "steps": steps, **measured, "elapsed_s": time.time() - started,
                  "fingerprint": fingerprint.current(setting.engine.device).to_dict()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
