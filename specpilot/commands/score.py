"""``specpilot score SETTING --engine E --dataset D``: answer quality as a sanity check.

gsm8k: final number; math500: boxed answer, normalised; humaneval / mbpp: the generated code runs
against the tests in a subprocess with time and memory limits (a best-effort sandbox: see
``specpilot.scoring.code_exec``). Token forcing, not this score, is the correctness proof.
"""

import dataclasses
from typing import Annotated
from typing import Literal

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    dataset: Annotated[Literal["gsm8k", "math500", "humaneval", "mbpp"], "dataset to score"]
    engine: Annotated[str, "engine: ar, stock, or a recipe name of the setting"] = "stock"
    limit: Annotated[int | None, "score only the first N examples"] = None
    max_new_tokens: Annotated[int, "generation budget per answer"] = 512
    timeout_s: Annotated[float, "wall/CPU seconds per code run (humaneval, mbpp)"] = 10.0
    memory_mib: Annotated[int, "address-space limit per code run in MiB"] = 1024
    json: Annotated[str | None, "also write the record as JSON to this path"] = None
    results_dir: Annotated[str | None, "results store (default: $SPECPILOT_RESULTS_DIR or "
                           "experiments/results)"] = None

    def __post_init__(self):
        if self.limit is not None and self.limit < 1:
            raise ValueError("--limit must be >= 1")
        if self.max_new_tokens < 1:
            raise ValueError("--max-new-tokens must be >= 1")
        if self.timeout_s <= 0 or self.memory_mib <= 0:
            raise ValueError("--timeout-s and --memory-mib must be > 0")


def run(args: Args) -> int:
    from specpilot.bench import header
    from specpilot.bench import publish
    from specpilot.bench.progress import progress_bar
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    from specpilot.scoring import load_task
    from specpilot.scoring.code_exec import ExecLimits
    from specpilot.scoring.evaluate import score_engine
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    recipe = recipe_for(setting, args.engine)
    task = load_task(args.dataset)
    rows = task.rows(args.limit)
    models = load_models(setting, with_drafter=recipe.speculative)
    limits = ExecLimits(timeout_s=args.timeout_s, memory_mib=args.memory_mib)
    with progress_bar(f"score {args.dataset}", len(rows)) as advance:
        body = score_engine(models.engine(recipe), models.tokenizer, task, rows,
                            args.max_new_tokens, limits, advance)
    record = publish({**header("score", setting, args.engine, recipe), **body},
                     args.results_dir, args.json)
    statuses = {}
    for example in record["examples"]:
        statuses[example["status"]] = statuses.get(example["status"], 0) + 1
    print(f"score {args.setting} --engine {args.engine} --dataset {args.dataset}: "
          f"{record['num_correct']}/{record['num_examples']} = {record['accuracy']:.1%} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))})")
    print(f"  stored: {record['store_path']}")
    return 0
