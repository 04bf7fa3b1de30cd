"""The Optuna kernel tuner: one ask/tell study per (op, shape bucket, environment).

Every trial's result is checked against the fp64 exact result before it is timed; a config that
computes a wrong result, fails to compile or crashes is told to Optuna as FAIL and never timed
(STYLE.md item 14). On a GPU each config runs in a child process within a time limit
(:mod:`specpilot.kernels.tuning.isolate`): one that hangs the device is killed and told as FAIL
with state ``"timeout"``, and the study goes on in a fresh process. An invalid proposal (a
combination the space's ``validate`` rejects, e.g. a tile over the register budget) never runs and
does not use up the trial budget; it is told to Optuna as COMPLETE with :data:`INVALID_PENALTY_US`
and state ``"invalid: ..."``, so the sampler learns where the valid configs are (see there). The
best checked config goes to the disk cache (:mod:`specpilot.kernels.tuning.cache`). Optuna is
imported here only, never by the engine.
"""

import dataclasses
import json
import random
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path

import torch

from specpilot.kernels.common.bench import Timing
from specpilot.kernels.common.bench import num_copies_for
from specpilot.kernels.common.bench import time_calls
from specpilot.kernels.common.check import check_close
from specpilot.kernels.common.interpret import interpreting
from specpilot.kernels.common.roofline import Roofline
from specpilot.kernels.common.roofline import ceiling_for
from specpilot.kernels.common.roofline import place
from specpilot.kernels.skinny_gemm.space import PTX_ONLY
from specpilot.kernels.tuning import cache
from specpilot.kernels.tuning.isolate import CaseSpec
from specpilot.kernels.tuning.isolate import trial_runner
from specpilot.kernels.tuning.ops import CASE_ID
from specpilot.kernels.tuning.ops import Case
from specpilot.kernels.tuning.ops import TunableOp
from specpilot.kernels.tuning.ops import complete_config
from specpilot.kernels.tuning.ops import get_op
from specpilot.kernels.tuning.ops import space_id
from specpilot.kernels.tuning.ops import valid_sweep


INVALID_PENALTY_US = 1e9
"""The value an invalid proposal is told as. Told as FAIL instead, TPE leaves it out of its model
and keeps drawing from its prior, where few combinations are valid: on w12f_gemm at q3_gate_up
M = 16, 1 proposal after the sweep was valid before the tuner stopped asking
(results/h200-2026-12-04-tuner-vs-sweep.json). Told as this value (worse than any real time),
most proposals are valid (``experiments/tuner_sampling_replay.py``)."""
MAX_SKIPPED_PER_TRIAL = 10
"""Invalid proposals and repeats of an evaluated config allowed per trial of the budget."""
MAX_DRAWS = 10_000
"""Draws :func:`random_valid_config` makes before it gives up (about 5-15% of draws are valid)."""


def checked_trials(study) -> list:
    """The study's trials whose config passed the check and was timed (not the invalid ones)."""
    import optuna

    return [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE
            and t.user_attrs.get("state") == "ok"]


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """The outcome for one M: best config, its timing and roofline, and the trial tally."""

    op: str
    m: int
    n: int
    k: int
    m_bucket: int
    config: dict | None
    timing: Timing | None
    roofline: Roofline | None
    num_ok: int
    num_failed: int
    num_invalid: int
    from_cache: bool
    cache_key: str
    cache_path: str
    study: str = ""
    """The Optuna study's name: the cache key and the space's ``space_id`` ("" from cache)."""
    num_repeat: int = 0
    """Proposals of a config already evaluated (told its result again, not in the budget)."""


def params_for(space, kernel: str) -> dict[str, list]:
    """The kernel's tuning parameters minus values this backend cannot run (PTX, interpreted)."""
    params = {}
    for name, choices in space.PARAMS[kernel].items():
        is_ptx = PTX_ONLY[name][0] if interpreting() and name in PTX_ONLY else None
        params[name] = [c for c in choices if not (is_ptx and is_ptx(c))]
    return params


def suggest_config(trial, space, m: int, extra_params: dict | None = None) -> dict:
    """Ask ``trial`` for a config: the kernel family, then that family's parameters."""
    kernel = trial.suggest_categorical("kernel", space.kernels_for(m))
    config = {"kernel": kernel}
    for name, choices in params_for(space, kernel).items():
        config[name] = trial.suggest_categorical(f"{kernel}.{name}", choices)
    for name, choices in (extra_params or {}).items():
        config[name] = trial.suggest_categorical(name, choices)
    return config


def random_valid_config(space, m: int, n: int, k: int, rng: random.Random,
                        extra_params: dict | None = None) -> dict | None:
    """A config drawn uniformly (kernel family, then each parameter) that the space can run at
    this shape, or None after :data:`MAX_DRAWS` invalid draws.

    TPE on these categorical spaces soon proposes configs it has already seen, or invalid ones
    while it has few observations; the tuner follows each such proposal with one of these
    (``experiments/tuner_sampling_replay.py`` counts what that gains)."""
    params = {kernel: params_for(space, kernel) for kernel in space.kernels_for(m)}
    for _ in range(MAX_DRAWS):
        kernel = rng.choice(list(params))
        config = {"kernel": kernel, **{name: rng.choice(choices)
                                       for name, choices in params[kernel].items()}}
        try:
            space.validate(config, m, n, k)
        except ValueError:
            continue
        return {**config, **{name: rng.choice(choices)
                             for name, choices in (extra_params or {}).items()}}
    return None


def explore_next(study, space, m: int, n: int, k: int, rng: random.Random,
                 extra_params: dict | None = None) -> None:
    """Make a :func:`random_valid_config` the study's next proposal (after an invalid one or a
    repeat)."""
    config = random_valid_config(space, m, n, k, rng, extra_params)
    if config is not None:
        study.enqueue_trial(_as_params(config))


def told_invalid(study, trial, config: dict, space, m: int, n: int, k: int, rng: random.Random,
                 extra_params: dict | None = None) -> bool:
    """True when ``space`` cannot run ``config`` here: the trial is then told COMPLETE with
    :data:`INVALID_PENALTY_US` (state ``invalid: ...``) and a random valid config is queued."""
    try:
        space.validate(config, m, n, k)
    except ValueError as err:
        trial.set_user_attr("state", f"invalid: {err}")
        study.tell(trial, INVALID_PENALTY_US)
        explore_next(study, space, m, n, k, rng, extra_params)
        return True
    return False


def _usable(entry: dict | None, space, m: int, n: int, k: int) -> dict | None:
    """A cached entry whose config (completed with parameters added since) this space can run,
    else None (it is tuned again)."""
    if entry is None:
        return None
    config = complete_config(space, entry["config"])
    try:
        space.validate(config, m, n, k)
    except ValueError:
        return None
    return {**entry, "config": config}


def _as_params(config: dict) -> dict:
    """Optuna's parameter names for ``config``: ``kernel.NAME``, extra (``_test``) keys as is."""
    kernel = config["kernel"]
    return {"kernel": kernel, **{k if k.startswith("_") else f"{kernel}.{k}": v
                                 for k, v in config.items() if k != "kernel"}}


def evaluate(op: TunableOp, case: Case, config: dict, device: torch.device, reps: int,
             timed: bool = True) -> tuple[str, Timing | None, str]:
    """``(state, timing, detail)``: state "ok" (checked, then timed unless not ``timed``), "wrong"
    or "error". Only a result that passed the check is ever timed."""
    try:
        out = op.launcher(*case.args[0], config=config)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    # A config that fails to compile or launch is a failed trial, whatever the exception.
    except Exception as err:  # noqa: BLE001
        return "error", None, f"{type(err).__name__}: {err}"[:500]
    result = check_close(op.name, out, case.exact, case.abs_sum)
    if not result.ok:
        return "wrong", None, str(result)
    if not timed:
        return "ok", None, str(result)
    calls = [lambda a=a: op.launcher(*a, config=config) for a in case.args]
    return "ok", time_calls(calls, device, reps=reps), str(result)


def _storage(storage: str | None, directory: Path):
    import optuna

    if storage and (storage.startswith("sqlite:") or storage.endswith(".db")):
        return storage if storage.startswith("sqlite:") else f"sqlite:///{storage}"
    path = Path(storage) if storage else directory / "optuna.journal"
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def tune(op: str, n: int, k: int, ms: Sequence[int], *, trials: int = 30, device: str = "cuda",
         seed: int = 0, storage: str | None = None, directory: Path | None = None,
         force: bool = False, extra_params: dict | None = None, reps: int = 20,
         isolate: bool | None = None, trial_timeout_s: float = 120.0,
         log: Callable[[str], None] = print) -> list[TuneResult]:
    """Tune ``op`` for a weight ``[n, k]`` at each M in ``ms``; returns one result per M.

    Args:
        trials: distinct configs checked and timed (or failed) per M; invalid proposals and
            repeats do not count (at most :data:`MAX_SKIPPED_PER_TRIAL` per trial are asked).
        device: "cuda" or "cpu" (the CPU path needs ``TRITON_INTERPRET=1`` set before triton
        loads). storage: Optuna storage: a ``sqlite:`` URL or ``*.db`` path, else a journal file
        path;
            default ``<cache dir>/optuna.journal``.
        directory: cache directory (default :func:`cache.cache_dir`).
        force: tune even if the cache already holds a config for this key.
        extra_params: more categorical parameters merged into every config; the enqueued sweep
            cycles through their choices (tests use ``{"_test_corrupt": [False, True]}`` to
            prove wrong configs are failed, never timed).
        isolate: run each config in a child process killed after ``trial_timeout_s`` seconds
            (compile, check and timing); default: on a GPU yes, in the interpreter no. A killed
            trial is FAIL with state "timeout"; the next config gets a fresh process.
    """
    import optuna

    from specpilot.fingerprint import current

    dev = torch.device(device)
    if dev.type == "cpu" and not interpreting():
        raise ValueError("tuning on CPU runs the Triton interpreter: set TRITON_INTERPRET=1 "
                         "before triton is imported")
    directory = directory or cache.cache_dir()
    tunable = get_op(op)
    fp = current(str(dev))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = []
    for m in ms:
        bucket = tunable.space.m_bucket(m)
        key = cache.entry_key(op, n, k, bucket, fp.kernel_key())
        path = str(cache.cache_file(directory))
        cached = None if force else _usable(cache.load_entry(key, directory), tunable.space,
                                            m, n, k)
        if cached is not None:
            log(f"{op} M={m} N={n} K={k}: cached {cached['config']} ({cached.get('p50_us')} us)")
            results.append(TuneResult(op, m, n, k, bucket, cached["config"], None, None, 0, 0, 0,
                                      True, key, path))
            continue
        # Enough rotating copies to defeat L2 for the smaller (W12, ~1.5 B/weight) of the formats.
        copies = num_copies_for(n * k * 3 // 2) if dev.type == "cuda" else 1
        runner = trial_runner(CaseSpec(op, m, n, k, str(dev), seed, copies), reps, isolate,
                              trial_timeout_s)
        study = optuna.create_study(
            storage=_storage(storage, directory),
            study_name=f"{key}|{space_id(tunable.space)}|{CASE_ID}",
            direction="minimize",
            sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(3, trials // 3)),
            load_if_exists=True)
        if not study.trials:
            valid = valid_sweep(tunable.space, m, n, k)
            # the sweep cycles through each extra parameter's choices, so every choice is tried
            # from the first trials on, whatever the sampler later proposes
            for i, config in enumerate(valid):
                extra = {p: choices[i % len(choices)] for p, choices in
                         (extra_params or {}).items()}
                study.enqueue_trial({**_as_params(config), **extra})
        with runner:
            counts = _run_trials(study, tunable, runner, m, n, k, trials, extra_params,
                                 random.Random(seed * 1000 + m))
            traffic = runner.traffic
        results.append(_finish(study, tunable, traffic, key, path, directory, fp, m, n, k,
                               counts, log))
    return results


def _run_trials(study, tunable, runner, m: int, n: int, k: int, trials: int,
                extra_params: dict | None, rng: random.Random) -> dict[str, int]:
    """Ask, validate, evaluate (each distinct config once) and tell until ``trials`` distinct
    configs were checked; a repeat is told its result again; an invalid proposal or a repeat is
    followed by a random valid config. Returns the counts ``ok``, ``failed``, ``invalid`` and
    ``repeat``."""
    import optuna

    num_ok = num_failed = num_invalid = num_repeat = 0
    seen: dict[str, tuple[str, Timing | None, str]] = {}
    while (num_ok + num_failed < trials
           and num_invalid + num_repeat < MAX_SKIPPED_PER_TRIAL * trials):
        trial = study.ask()
        config = suggest_config(trial, tunable.space, m, extra_params)
        trial.set_user_attr("config", config)
        if told_invalid(study, trial, config, tunable.space, m, n, k, rng, extra_params):
            num_invalid += 1
            continue
        ck = json.dumps(config, sort_keys=True)
        repeat = ck in seen
        if not repeat:
            try:
                seen[ck] = runner.evaluate(config)
            except BaseException:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not left RUNNING
                raise
        state, timing, detail = seen[ck]
        trial.set_user_attr("state", state)
        trial.set_user_attr("detail", detail)
        if state == "ok":
            trial.set_user_attr("timing", timing.to_dict())
            study.tell(trial, timing.p50_us)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        if repeat:
            num_repeat += 1
            explore_next(study, tunable.space, m, n, k, rng, extra_params)
        elif state == "ok":
            num_ok += 1
        else:
            num_failed += 1
    return {"ok": num_ok, "failed": num_failed, "invalid": num_invalid, "repeat": num_repeat}


def _finish(study, tunable, traffic, key, path, directory, fp, m, n, k, counts: dict,
            log) -> TuneResult:
    bucket = tunable.space.m_bucket(m)
    num_ok, num_failed, num_invalid = counts["ok"], counts["failed"], counts["invalid"]
    done = checked_trials(study)
    if not done:
        log(f"{tunable.name} M={m} N={n} K={k}: no config passed the check ({num_failed} failed)")
        return TuneResult(tunable.name, m, n, k, bucket, None, None, None, num_ok, num_failed,
                          num_invalid, False, key, path, study.study_name, counts["repeat"])
    best = min(done, key=lambda t: t.value)
    timing = Timing(**best.user_attrs["timing"])
    roof = place(tunable.name, m, n, k, traffic, timing, ceiling_for(fp.gpu))
    config = best.user_attrs["config"]
    cache.store_entry(key, {
        "op": tunable.name, "n": n, "k": k, "m": m, "m_bucket": bucket, "config": config,
        "p20_us": timing.p20_us, "p50_us": timing.p50_us, "p80_us": timing.p80_us,
        "roofline": roof.to_dict(), "kernel_key": fp.kernel_key(), "fingerprint": fp.to_dict(),
        "study": study.study_name, "num_complete": len(done)}, directory)
    log(f"{tunable.name} M={m} N={n} K={k}: best {config} p50 {timing.p50_us:.1f} us "
        f"({roof.tb_s:.2f} TB/s) ok={num_ok} failed={num_failed} invalid={num_invalid} "
        f"repeat={counts['repeat']}")
    return TuneResult(tunable.name, m, n, k, bucket, config, timing, roof, num_ok, num_failed,
                      num_invalid, False, key, path, study.study_name, counts["repeat"])
