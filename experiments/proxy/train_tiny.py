"""Train the tiny proxy pair of ``cpu_c1_tiny`` on CPU and write it where ``bundled:`` reads it.

    OMP_NUM_THREADS=1 python experiments/proxy/train_tiny.py            # full recipe, ~15 min
    python experiments/proxy/train_tiny.py --out /tmp/pair --target-steps 20 --drafter-steps 20

Stages (all seeded; see experiments/proxy/README.md for the recipe and the recorded run):
target LM on gsm8k train -> round-trip through its bf16 checkpoint -> the reloaded target's greedy
continuations of gsm8k train questions -> DFlash2 drafter -> bf16 checkpoint -> tau of the stock
engine on held-out gsm8k *train* questions (the test split is never seen). ``training.json`` in the
output records the recipe, the loss curves, the wall times and that measurement.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from specpilot import tiny
from specpilot.datasets import load_prompts
from specpilot.engines.engine import Engine
from specpilot.engines.engine import SamplingParams
from specpilot.engines.models import load_model
from specpilot.recipe import AR
from specpilot.recipe import STOCK
from specpilot.training import DRAFTER_CONFIG
from specpilot.training import TARGET_CONFIG
from specpilot.training import DrafterTraining
from specpilot.training import TargetTraining
from specpilot.training import greedy_continuations
from specpilot.training import save_checkpoint
from specpilot.training import train_drafter
from specpilot.training import train_target

NUM_EVAL_PROMPTS = 16
EVAL_PARAMS = SamplingParams(max_new_tokens=64, ignore_eos=True)


def train_prompts(tokenizer, num_prompts: int, seed: int) -> tuple[list, list]:
    """(training prompts, held-out evaluation prompts): gsm8k train questions in a seeded order."""
    questions = load_prompts("gsm8k_train")
    order = torch.randperm(len(questions), generator=torch.Generator().manual_seed(seed + 3))
    ids = [tokenizer.encode(questions[i]).ids for i in order.tolist()]
    return ids[:num_prompts], ids[-NUM_EVAL_PROMPTS:]


def measure_tau(target, drafter, prompts) -> dict:
    """Stock engine vs AR on ``prompts``: mean tau, and whether every output matched AR exactly."""
    spec, ar = Engine(target, drafter, STOCK, max_len=1024), Engine(target, None, AR, max_len=1024)
    steps, lossless = [], True
    for prompt in prompts:
        out = spec.generate(prompt, EVAL_PARAMS)
        steps.extend(out.accept_lengths)
        lossless &= out.tokens == ar.generate(prompt, EVAL_PARAMS).tokens
    return {"tau": round(sum(steps) / len(steps), 3), "num_prompts": len(prompts),
            "spec_equals_ar": lossless}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=tiny.TRAINED_DIR)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-steps", type=int, default=TargetTraining.num_steps)
    parser.add_argument("--drafter-steps", type=int, default=DrafterTraining.num_steps)
    parser.add_argument("--num-prompts", type=int, default=1024,
                        help="gsm8k train questions the target continues for the drafter")
    parser.add_argument("--num-new-tokens", type=int, default=80,
                        help="greedy tokens per continuation")
    args = parser.parse_args(argv)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny.TOKENIZER_FILE))
    started, timings = time.perf_counter(), {}
    target, target_log = train_target(tokenizer, TargetTraining(args.seed, args.target_steps))
    target_dir = save_checkpoint(target, TARGET_CONFIG, args.out / tiny.BUNDLED["tiny-trained-qwen3_5"].name,
                                 extra_files={"tokenizer.json": tiny.TOKENIZER_FILE.read_bytes()})
    target = load_model(target_dir)  # train the drafter on the weights as shipped (bf16-rounded)
    timings["target_s"] = round(time.perf_counter() - started, 1)

    prompts, eval_prompts = train_prompts(tokenizer, args.num_prompts, args.seed)
    mark = time.perf_counter()
    layers = tuple(DRAFTER_CONFIG["dflash_config"]["target_layer_ids"])
    continuations = greedy_continuations(target, prompts, args.num_new_tokens, layers)
    timings["continuations_s"] = round(time.perf_counter() - mark, 1)

    mark = time.perf_counter()
    drafter, drafter_log = train_drafter(target, continuations,
                                         DrafterTraining(args.seed, args.drafter_steps))
    drafter_dir = save_checkpoint(drafter, DRAFTER_CONFIG, args.out / tiny.BUNDLED["tiny-trained-dflash2"].name)
    timings["drafter_s"] = round(time.perf_counter() - mark, 1)
    timings["total_s"] = round(time.perf_counter() - started, 1)

    evaluation = measure_tau(target, load_model(drafter_dir), eval_prompts)
    sizes = {p.relative_to(args.out).as_posix(): p.stat().st_size
             for p in sorted(args.out.glob("*/*")) if p.name != "training.json"}
    record = {"seed": args.seed, "threads": torch.get_num_threads(), "torch": torch.__version__,
              "num_prompts": args.num_prompts, "num_new_tokens": args.num_new_tokens,
              "timings": timings, "target": target_log, "drafter": drafter_log,
              "held_out_train_prompts": evaluation, "file_bytes": sizes}
    (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"timings": timings, "held_out": evaluation, "file_bytes": sizes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
