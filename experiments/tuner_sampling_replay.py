"""Offline: how many distinct valid configs the tuner's sampler proposes, per way of telling it.

No kernel runs: each valid config gets a stand-in time (a hash of the config, deterministic), so
this measures only how the sampler moves through a space's valid region, not which config is
fast. Per row (op, K, N, M) and mode, one seeded TPE study starts with the space's SWEEP configs
valid there (as ``tune()`` enqueues them), then ``--asks`` more proposals are made and validated:

- ``fail``: an invalid proposal is told FAIL (the tuner before 2026-12-04);
- ``penalty``: told COMPLETE with ``INVALID_PENALTY_US``;
- ``penalty+explore``: that, and an invalid proposal or a repeat is followed by a random valid
  config (``study.explore_next``; what ``tune()`` and the kernel sub-agent do).

Prints and writes ``$OUT/tuner_sampling_replay.json``: per row and mode, the valid proposals and
the distinct configs seen (the sweep's included). CPU only, a few seconds per row::

    python3 experiments/tuner_sampling_replay.py [--asks 200]
"""

import argparse
import json
import os
import random
import zlib
from pathlib import Path

import optuna

from specpilot.kernels.tuning.ops import space_of
from specpilot.kernels.tuning.ops import valid_sweep
from specpilot.kernels.tuning.study import INVALID_PENALTY_US
from specpilot.kernels.tuning.study import _as_params
from specpilot.kernels.tuning.study import explore_next
from specpilot.kernels.tuning.study import suggest_config

ROWS = (("w12f_gemm", 5120, 34816, 16), ("w12f_gemm", 19968, 6656, 8),
        ("w12f_gemm", 6144, 5120, 1), ("skinny_gemm", 6144, 5120, 64))
MODES = ("fail", "penalty", "penalty+explore")


def stand_in_us(config: dict) -> float:
    return 50.0 + zlib.crc32(json.dumps(config, sort_keys=True).encode()) % 1000 / 10


def replay(op: str, k: int, n: int, m: int, mode: str, asks: int, seed: int) -> dict:
    space = space_of(op)
    rng = random.Random(seed)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed,
                                                                   n_startup_trials=10))
    sweep = valid_sweep(space, m, n, k)
    for config in sweep:
        study.enqueue_trial(_as_params(config))
    num_sweep = len(sweep)
    seen: set[str] = set()
    valid = 0
    for _ in range(num_sweep + asks):
        trial = study.ask()
        config = suggest_config(trial, space, m)
        try:
            space.validate(config, m, n, k)
        except ValueError:
            if mode == "fail":
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, INVALID_PENALTY_US)
            if mode == "penalty+explore":
                explore_next(study, space, m, n, k, rng)
            continue
        valid += 1
        key = json.dumps(config, sort_keys=True)
        if key in seen and mode == "penalty+explore":
            explore_next(study, space, m, n, k, rng)
        seen.add(key)
        study.tell(trial, stand_in_us(config))
    return {"op": op, "k": k, "n": n, "m": m, "mode": mode, "num_sweep": num_sweep,
            "asks_after_sweep": asks, "valid": valid, "distinct": len(seen)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for op, k, n, m in ROWS:
        for mode in MODES:
            rows.append(replay(op, k, n, m, mode, args.asks, args.seed))
            print(rows[-1], flush=True)
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "tuner_sampling_replay.json").write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
