"""``specpilot sps-table SETTING --engine E``: measure the confidence budget's steps/s table on
this GPU and engine, and write a recipe that uses it (``verify_budget='sps'``)."""

import dataclasses
import json
from typing import Annotated

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. h200_c32_qwen38-27b_dflash2"]
    engine: Annotated[str, "the speculative engine whose steps are timed (stock, a recipe name, "
                      "BASE+MECHANISM)"] = "stock"
    concurrency: Annotated[int | None, "rows of the batch engine (default: the setting's "
                           "concurrency)"] = None
    name: Annotated[str | None, "recipe written to the setting's recipes/ (default: "
                    "ENGINE-budget, with '+' as '-')"] = None
    rounds: Annotated[int, "timed runs per (bucket, width), in rotating order"] = 3
    steps: Annotated[int, "decode steps per timed run"] = 4
    json: Annotated[str | None, "write the measurement (with the fingerprint) to this path"] = None

    def __post_init__(self):
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("--concurrency must be >= 1")
        if self.rounds < 1 or self.steps < 1:
            raise ValueError("--rounds and --steps must be >= 1")


def run(args: Args) -> int:
    from specpilot.bench.sps import save_budget_recipe
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    from specpilot.settings import load_setting

    setting = load_setting(args.setting)
    base = recipe_for(setting, args.engine)  # a bad name fails before the models load
    path, record = save_budget_recipe(load_models(setting), base, args.engine,
                                      args.concurrency or setting.scenario.concurrency,
                                      args.name, rounds=args.rounds, steps=args.steps)
    print(f"wrote {path}: verify_budget 'sps' over {len(record['sps_table'])} measured points")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0
