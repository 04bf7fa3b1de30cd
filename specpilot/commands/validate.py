"""``specpilot validate SETTING --engine E``: token forcing against the AR reference; exit 0 = pass."""

import dataclasses
import json
from typing import Annotated

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    engine: Annotated[str, "engine to judge: stock, final, a recipe name, or broken:<kind>"] = "stock"
    dataset: Annotated[str | None, "bundled prompt set (default: the setting's)"] = None
    prompts_file: Annotated[str | None, "JSONL file with one 'prompt' field per line"] = None
    num_prompts: Annotated[int | None, "number of prompts (default: the setting's)"] = None
    max_new_tokens: Annotated[int | None, "tokens per prompt (default: the setting's)"] = None
    json: Annotated[str | None, "write the report as JSON to this path"] = None
    seed: Annotated[int, "seed for the canary positions"] = 0
    dtype: Annotated[str | None, "run the candidate and the reference in this dtype (default: the "
                     "setting's [validation] dtype, else its engine's); float32 (TF32 off) "
                     "separates the mechanism from bf16 rounding, whose near-ties differ between a "
                     "one-row and a many-row forward"] = None
    results_dir: Annotated[str | None, "results store (default: $SPECPILOT_RESULTS_DIR or "
                           "experiments/results)"] = None

    def __post_init__(self):
        if self.dataset and self.prompts_file:
            raise ValueError("give --dataset or --prompts-file, not both")
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise ValueError(f"--dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        for name in ("num_prompts", "max_new_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")


def run(args: Args) -> int:
    from specpilot.bench import publish
    from specpilot.bench import validation_record
    from specpilot.datasets import load_prompts
    from specpilot.datasets import prompts_file
    from specpilot.engine_names import build_engine
    from specpilot.engine_names import recipe_for
    from specpilot.engines.engine import SamplingParams
    from specpilot.recipe import AR
    from specpilot.settings import load_setting
    from specpilot.validation import validate_engine
    from specpilot.validation.twin import strict_float32
    from specpilot.validation.twin import validation_models

    setting = load_setting(args.setting)
    recipe = None if args.engine.startswith("broken:") else recipe_for(setting, args.engine)
    # the setting's models, or its validation twin ([validation] depth / dtype, or --dtype)
    models = validation_models(setting, with_drafter=args.engine != "ar", dtype=args.dtype,
                               recipe=recipe)
    val = setting.validation
    count = args.num_prompts or val.num_prompts
    texts = (prompts_file(args.prompts_file, count) if args.prompts_file
             else load_prompts(args.dataset or val.dataset, count))
    prompts = [models.tokenizer.encode(t).ids for t in texts]
    params = SamplingParams(max_new_tokens=args.max_new_tokens or val.max_new_tokens)
    with strict_float32(models.setting.engine.dtype == "float32"):
        report = validate_engine(models.engine(AR), build_engine(models, args.engine), prompts,
                                 params, epsilon=val.epsilon,
                                 max_mismatch_rate=val.max_mismatch_rate,
                                 num_canaries=val.num_canaries, seed=args.seed, name=args.engine,
                                 concurrency=setting.scenario.concurrency)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=2)
    publish(validation_record(report, setting, args.engine, recipe, ran_on=models.setting),
            args.results_dir)
    verdict = "PASS" if report.passed else "FAIL"
    print(f"{verdict} {args.setting} --engine {args.engine}: {report.num_prompts} prompts, "
          f"{report.num_tokens} tokens, {report.num_mismatches} mismatches "
          f"(max gap {report.max_mismatch_gap:.3g}), tau {report.tau:.2f}"
          + (f", batched on buckets {report.buckets}" if report.buckets else ""))
    if report.num_mismatches and report.num_explained_by_shape is not None:
        print(f"  {report.num_explained_by_shape} of {report.num_mismatches} mismatch(es) made by "
              "the candidate's own forward decoding one token a step too: the verify's batch "
              "shape, not the mechanism (diagnostic; the verdict does not use it)")
    for failure in report.failures:
        print(f"  - {failure}")
    return 0 if report.passed else 1
