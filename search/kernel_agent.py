"""The kernel sub-agent: Optuna ask/tell, on the driver, for the GEMM farthest from its ceiling.

1. Survey: a worker times the current config (the tuning cache's, else the space's default: what
   the engine would launch) of each target weight shape at the verify row count, on the op the
   champion runs that weight on (:func:`gemm_op`: the W12 GEMM of its plane order for a packed
   group, else the bf16 Triton GEMM); the driver places each on the roofline of the setting's GPU
   and picks the lowest fraction of the read ceiling.
2. Study: one Optuna study per (setting, op, shape, M bucket, kernel fingerprint) in the
   campaign's journal storage. Warm start: the surveyed config and the space's sweep (known-good
   configs) are enqueued before the sampler proposes anything.
3. Trials: the driver asks ``kernel_trials`` configs the space can run and the study has not
   evaluated (:func:`ask_configs`), a worker checks each against the reference and times only the
   ones that pass, each in a trial process with a time limit on a GPU; the driver tells Optuna
   (wrong, failing or hung configs are FAIL, never fast) and writes the best config into the
   tuning cache keyed by the worker's fingerprint.
"""

import json

import torch

BF16_OP = "skinny_gemm"
MAX_SURVEY_SHAPES = 6


def gemm_op(recipe, group: str) -> str:
    """The tunable GEMM op that runs weight group ``group`` (``target``, ``lm_head``) under
    ``recipe``: the W12 GEMM of the recipe's plane order when it packs the group (those decode in
    registers whatever ``gemm`` says), else the bf16 Triton GEMM. A ``gemm = "torch"`` champion
    runs cuBLAS, which has no tuning space; its weights are surveyed on the Triton GEMM that a
    ``gemm = "triton"`` candidate would run."""
    if group in recipe.w12:
        from specpilot.kernels.w12.format import GEMM_FOR_ORDER

        return GEMM_FOR_ORDER[recipe.w12_order]
    return BF16_OP


def target_gemms(target_config: dict, recipe) -> list[tuple[str, int, int]]:
    """Distinct (op, N, K) of the target's Linear weights under ``recipe``, largest first."""
    from specpilot.costmodel.phases import _meta_model

    model = _meta_model(target_config)
    gemms = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            group = "lm_head" if name.rsplit(".", 1)[-1] == "lm_head" else "target"
            gemms.add((gemm_op(recipe, group), *module.weight.shape))
    return sorted(gemms, key=lambda g: (-g[1] * g[2], g[0]))[:MAX_SURVEY_SHAPES]


def farthest(survey_rows: list[dict], read_tb_s: float) -> dict | None:
    """The surveyed shape with the lowest fraction of the read ceiling (its row, with fraction)."""
    best = None
    for row in survey_rows:
        floor_us = row["traffic_bytes"] / (read_tb_s * 1e12) * 1e6
        fraction = floor_us / row["p50_us"] if row["p50_us"] > 0 else 1.0
        row = {**row, "floor_us": floor_us, "fraction_of_ceiling": fraction}
        if best is None or fraction < best["fraction_of_ceiling"]:
            best = row
    return best


def study_name(setting: str, op: str, n: int, k: int, bucket: int, kernel_key: str) -> str:
    """One study per setting, op, shape, M bucket, environment, tuning space (``space_id``: a
    study of an older space refuses the new space's choices, so it is left alone) and timing case
    (``CASE_ID``)."""
    from specpilot.kernels.tuning.ops import CASE_ID
    from specpilot.kernels.tuning.ops import space_id
    from specpilot.kernels.tuning.ops import space_of

    return f"{setting}:{op}:{n}x{k}:m{bucket}:{kernel_key}:{space_id(space_of(op))}:{CASE_ID}"


def open_study(storage_path: str, name: str, seed: int):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(storage_path))
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)
    study = optuna.create_study(storage=storage, study_name=name, direction="minimize",
                                sampler=sampler, load_if_exists=True)
    # The driver is the study's only writer: a trial still RUNNING was asked by a driver that died
    # before telling it. Close it as failed so the sampler does not wait on it.
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
    return study


def warm_start(study, space, m: int, n: int, k: int, known_good: list[dict]) -> int:
    """Enqueue known-good configs (once per study); returns how many were enqueued."""
    from specpilot.kernels.tuning.study import _as_params

    if study.trials:
        return 0
    count = 0
    for config in known_good:
        try:
            space.validate(config, m, n, k)
        except ValueError:
            continue
        study.enqueue_trial(_as_params(config), skip_if_exists=True)
        count += 1
    return count


def ask_configs(study, space, m: int, n: int, k: int, num: int,
                seed: int = 0) -> list[tuple[object, dict]]:
    """``num`` new proposals the space can run at this shape, for a worker to check and time.

    An invalid proposal is told at once (COMPLETE with ``INVALID_PENALTY_US``, so TPE learns
    where the valid configs are); a config the study already evaluated (or asked in this batch)
    is told its earlier result; either is followed by a random valid config
    (``tuning.study.explore_next``); up to ``MAX_SKIPPED_PER_TRIAL`` of these per config asked."""
    import random

    import optuna

    from specpilot.kernels.tuning.study import MAX_SKIPPED_PER_TRIAL
    from specpilot.kernels.tuning.study import explore_next
    from specpilot.kernels.tuning.study import suggest_config
    from specpilot.kernels.tuning.study import told_invalid

    rng = random.Random(seed * 1000 + len(study.trials))
    done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
    known = {json.dumps(t.user_attrs["config"], sort_keys=True): t for t in study.trials
             if t.state in done and "config" in t.user_attrs
             and not t.user_attrs.get("state", "").startswith("invalid")}
    batch: set[str] = set()
    out = []
    for _ in range(MAX_SKIPPED_PER_TRIAL * num):
        if len(out) == num:
            break
        trial = study.ask()
        config = suggest_config(trial, space, m)
        trial.set_user_attr("config", config)
        if told_invalid(study, trial, config, space, m, n, k, rng):
            continue
        key = json.dumps(config, sort_keys=True)
        if key in known or key in batch:
            earlier = known.get(key)
            trial.set_user_attr("state", "repeat")
            if earlier is not None and earlier.state == optuna.trial.TrialState.COMPLETE:
                study.tell(trial, earlier.value)
            else:  # a failed config, or one still in this batch: no result to repeat yet
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            explore_next(study, space, m, n, k, rng)
            continue
        batch.add(key)
        out.append((trial, config))
    return out


def tell_results(study, asked: list[tuple[object, dict]], results: list[dict]) -> dict:
    """Tell Optuna each outcome; returns counts by state."""
    import optuna

    from specpilot.kernels.tuning.study import INVALID_PENALTY_US

    counts: dict[str, int] = {}
    for (trial, _), result in zip(asked, results):
        state = result["state"]
        counts[state] = counts.get(state, 0) + 1
        study._storage.set_trial_user_attr(trial._trial_id, "state", state)
        study._storage.set_trial_user_attr(trial._trial_id, "detail",
                                           str(result.get("detail", ""))[:500])
        if state == "ok" and result.get("timing"):
            study._storage.set_trial_user_attr(trial._trial_id, "timing",
                                               json.dumps(result["timing"]))
            study.tell(trial, result["timing"]["p50_us"])
        elif state == "invalid":  # never ran: told so that TPE learns where valid configs are
            study.tell(trial, INVALID_PENALTY_US)
        else:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return counts


def best_entry(study, op: str, n: int, k: int, m: int, bucket: int, fingerprint: dict,
               kernel_key: str, traffic_bytes: int, read_tb_s: float) -> dict | None:
    """The tuning-cache entry for the study's best checked config (None if none passed)."""
    from specpilot.kernels.tuning.study import checked_trials

    done = checked_trials(study)
    if not done:
        return None
    best = min(done, key=lambda t: t.value)
    timing = json.loads(best.user_attrs["timing"]) if "timing" in best.user_attrs else {}
    floor_us = traffic_bytes / (read_tb_s * 1e12) * 1e6
    return {"op": op, "n": n, "k": k, "m": m, "m_bucket": bucket,
            "config": best.user_attrs["config"], "p50_us": best.value,
            "p20_us": timing.get("p20_us"), "p80_us": timing.get("p80_us"),
            "fraction_of_ceiling": floor_us / best.value if best.value else None,
            "kernel_key": kernel_key, "fingerprint": fingerprint, "study": study.study_name,
            "num_complete": len(done)}
