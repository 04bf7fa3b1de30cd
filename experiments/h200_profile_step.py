"""Kernel-level profile of one setting's spec decode (CUDA graphs on): torch.profiler over a few
generations, every GPU kernel's count and total time, grouped by name. Writes
$OUT/profile-<setting>.json (the top kernels per decode step, and the step count).

    python3 experiments/h200_profile_step.py [SETTING] [--engine stock] [--prompts 2]
"""

import argparse
import collections
import json
import os
from pathlib import Path

import torch

OUT = Path(os.environ.get("OUT", "/tmp/out"))


def main(argv=None) -> None:
    from specpilot import fingerprint
    from specpilot.bench.workload import replay_for
    from specpilot.bench.workload import workload_for
    from specpilot.build import load_models
    from specpilot.engine_names import recipe_for
    from specpilot.settings import load_setting

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("setting", nargs="?", default="h200_c1_qwen38-27b_dflash2")
    parser.add_argument("--engine", default="stock")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--phases", default="",
                        help="also profile these captured phase graphs alone (e.g. commit,draft): "
                             "each replayed 50 times with its last inputs")
    args = parser.parse_args(argv)
    setting = load_setting(args.setting)
    models = load_models(setting)
    workload = workload_for(setting, models.tokenizer, num_prompts=args.prompts, max_new_tokens=96)
    replay = replay_for(models, workload)
    engine = models.engine(recipe_for(setting, args.engine))

    def run() -> int:
        steps = 0
        for i, prompt in enumerate(workload.prompts):
            plan = replay.plan(engine, i, seed=i) if replay is not None else None
            out = engine.generate(list(prompt), workload.params, replay=plan)
            steps += len(out.accept_lengths)
        return steps

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    run()  # warm-up: graphs captured, kernels compiled
    sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        steps = run()
        sync()
    rows = _kernels(prof, steps)
    record = {"kind": "kernel_profile", "setting": args.setting, "engine": args.engine,
              "steps": steps, "gpu_us_per_step": sum(r["us_per_step"] for r in rows),
              "fingerprint": fingerprint.current(setting.engine.device).to_dict(), "kernels": rows[:args.top],
              "small_kernels": [r for r in rows if r["us_per_step"] < 400][:args.top]}
    record["phases"] = {}
    graphs = engine._persistent[2] if engine._persistent is not None else {}
    for phase in filter(None, args.phases.split(",")):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(50):
                graphs[phase].graph.replay()
            sync()
        record["phases"][phase] = _kernels(prof, 50)[:args.top]
        print(f"-- {phase} graph alone, per replay:")
        for r in record["phases"][phase]:
            print(f"{r['us_per_step']:9.1f} us {r['calls_per_step']:6.1f}x  {r['kernel'][:110]}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"profile-{args.setting}.json").write_text(json.dumps(record, indent=1))
    for r in rows[:args.top]:
        print(f"{r['us_per_step']:9.1f} us {r['calls_per_step']:6.1f}x  {r['kernel'][:110]}")


def _kernels(prof, steps: int) -> list[dict]:
    """Every CUDA kernel of ``prof``: calls and GPU time per step, largest first."""
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels[event.name][0] += 1
            kernels[event.name][1] += event.device_time_total
    return sorted(({"kernel": name[:160], "calls_per_step": n / steps, "us_per_step": us / steps}
                   for name, (n, us) in kernels.items()), key=lambda r: -r["us_per_step"])


if __name__ == "__main__":
    main()
