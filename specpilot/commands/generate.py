"""``specpilot generate SETTING --engine E --prompt TEXT``: print the text and the acceptance length."""

import dataclasses
from typing import Annotated

from specpilot.cli import Positional


@dataclasses.dataclass(frozen=True)
class Args:
    setting: Annotated[str, Positional, "deployment setting, e.g. cpu_c1_tiny"]
    prompt: Annotated[str, "prompt text"]
    engine: Annotated[str, "engine: ar, stock, or a recipe name of the setting"] = "stock"
    max_new_tokens: Annotated[int, "tokens to generate"] = 64
    temperature: Annotated[float, "sampling temperature (0 = greedy)"] = 0.0
    seed: Annotated[int, "sampling seed"] = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError("--max-new-tokens must be >= 1")
        if self.temperature < 0:
            raise ValueError("--temperature must be >= 0")


def run(args: Args) -> int:
    from specpilot.build import load_models
    from specpilot.engine_names import build_engine
    from specpilot.engines.engine import SamplingParams
    from specpilot.settings import load_setting

    models = load_models(load_setting(args.setting), with_drafter=args.engine != "ar")
    engine = build_engine(models, args.engine)
    ids = models.tokenizer.encode(args.prompt).ids
    result = engine.generate(ids, SamplingParams(max_new_tokens=args.max_new_tokens,
                                                 temperature=args.temperature, seed=args.seed))
    print(models.tokenizer.decode(result.tokens))
    print(f"[{args.engine}] {len(result.tokens)} tokens, {len(result.accept_lengths)} steps, "
          f"acceptance length tau = {result.tau:.2f}, finish = {result.finish_reason}")
    return 0
