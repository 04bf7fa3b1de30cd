"""The gap table of one measured engine: per phase, measured ms vs the cost model's floor, and a
calibrated prediction.

Floor: bytes over the read ceiling (or FLOPs over the bf16 rate) of the phase — what no kernel can
beat. Prediction: ``floor * efficiency + fixed``. A phase's fixed cost (kernel launches, ramps and
tails, host gaps, scalar uploads: what does not scale with bytes) is measured on the worker's GPU by
the ``measure`` job, which runs the same engine build on shrunk models
(:func:`specpilot.costmodel.fixed.measure_fixed_ms`); without that, it is the phase's kernels (counted
from the engine's own step functions, :func:`specpilot.costmodel.kernel_counts`) times a per-kernel
cost (the worker's CUDA-graph probe, else the SKU table's). The rest of the time is bandwidth-bound,
at the efficiency the *AR step* of the same engine build reaches once its own fixed cost is taken
out, i.e. "this phase would run as close to its ceiling as plain decoding does". Without a fixed
cost the prediction is the floor scaled by AR
measured / AR floor. A phase whose measured time exceeds its prediction is where the engine wastes
more than AR does — the campaign pushes there first. ``prediction_error`` says how far the
calibrated model is from the measurement (the acceptance check asks for 20%).
"""

from specpilot.costmodel import GPUS
from specpilot.costmodel import bandwidth_efficiency
from specpilot.costmodel import engine_costs
from specpilot.costmodel import gap_table
from specpilot.costmodel import kernel_counts
from specpilot.costmodel import predicted_ms


def gap_rows(setting, features: dict, measured: dict, recipe, context: int = 512) -> list[dict]:
    """Rows {phase, measured_ms, floor_ms, gap, excess_ms[, predicted_ms, prediction_error,
    fixed_ms, num_kernels, launch_ms, bw_efficiency]}; ``fixed_ms``, ``num_kernels`` and
    ``launch_ms`` are None when no fixed cost is known (CPU workers, an unmeasured GPU)."""
    from specpilot.search.catalog import model_configs

    if measured.get("state") not in (None, "ok") or not measured.get("phases_ms"):
        return []
    gpu = GPUS.get(setting.gpu)
    if gpu is None:
        return []
    target, drafter = model_configs(setting)
    drafter = drafter if recipe.speculative else None
    block = recipe.block_size or features.get("block_size") or 1
    costs = engine_costs(target, drafter, gpu, block, context, recipe.gdn_rollback)
    phases = dict(measured["phases_ms"])
    if not recipe.speculative:
        phases = {"ar": phases.get("verify", 0.0)}
    rows = gap_table(costs, {k: v for k, v in phases.items() if k in costs})
    ar_ms = measured.get("ar_ms_per_step")
    if ar_ms and costs["ar"].floor_ms > 0:
        fixed, kernels, launch_us = _fixed_ms(measured, gpu, target, drafter, recipe)
        efficiency = bandwidth_efficiency(costs["ar"].floor_ms, ar_ms, fixed.get("ar", 0.0))
        for row in rows:
            phase = row["phase"]
            row["num_kernels"] = kernels.get(phase)
            row["launch_ms"] = (kernels[phase] * launch_us / 1e3
                                if phase in kernels and launch_us else None)
            row["fixed_ms"] = fixed.get(phase)
            row["bw_efficiency"] = efficiency
            row["predicted_ms"] = predicted_ms(row["floor_ms"], efficiency, fixed.get(phase, 0.0))
            row["prediction_error"] = (row["predicted_ms"] - row["measured_ms"]) / \
                row["measured_ms"] if row["measured_ms"] else None
        rows.sort(key=lambda r: -(r["measured_ms"] - r["predicted_ms"]))
    return rows


def _fixed_ms(measured: dict, gpu, target: dict, drafter: dict | None, recipe):
    """Each phase's fixed cost (ms), the kernels counted and the per-kernel cost used: the worker's
    shrunk-model measurement (``fixed_ms``) when it ran, else kernels x the measured (or SKU
    table's) per-kernel cost, else nothing (the prediction is the floor scaled by AR)."""
    launch_us = measured.get("launch_us") or gpu.launch_us  # this worker's GPU first
    kernels = kernel_counts(target, drafter, recipe) if launch_us or measured.get("fixed_ms") \
        else {}
    if measured.get("fixed_ms"):
        return dict(measured["fixed_ms"]), kernels, launch_us
    if launch_us:
        return {p: n * launch_us / 1e3 for p, n in kernels.items()}, kernels, launch_us
    return {}, kernels, launch_us


def occupancy_widths(setting, concurrency: int | None = None,
                     bounds_at=None) -> tuple[tuple[int, int], ...]:
    """A recipe's ``verify_widths`` for this setting: for each batch bucket 2, 4, .. up to the
    setting's concurrency, the verify width the cost model bounds highest with that many requests
    decoded together (:func:`width_bounds_at`), listed where it changes; () when the whole block is
    best everywhere, or without a profile or GPU ceilings. ``bounds_at(rows)`` replaces the
    setting's own (the costmodel command passes its GPU, profile and context)."""
    concurrency = concurrency or setting.scenario.concurrency
    bounds_at = bounds_at or width_bounds_at(setting)
    if bounds_at is None:
        return ()
    table, current = [], None
    for rows in _multi_row_buckets(concurrency):
        bounds = bounds_at(rows)
        best = max(bounds, key=lambda w: (bounds[w], w))  # ties: the wider
        if best != (current or max(bounds)):
            table.append((rows, best))
            current = best
    return tuple(table)


def two_stage_table(setting, concurrency: int | None = None,
                    bound_at=None) -> tuple[tuple[int, int, int], ...]:
    """A recipe's ``two_stage`` for this setting: ``(rows, window, prefix)`` from the first batch
    bucket (2, 4, .. up to the setting's concurrency) where two-stage verification bounds higher
    than the best single-stage width (:func:`specpilot.costmodel.phases.two_stage_bound`) and at
    every larger one (an entry holds for every bucket above it), listed where the best window or
    prefix changes; () where it never pays that way, for a hybrid target (the engine runs it on
    attention-only targets), or without a profile or GPU ceilings. ``bound_at(rows)`` replaces
    the setting's own two_stage_bound."""
    from specpilot.costmodel.phases import two_stage_bound
    from specpilot.search.catalog import setting_features

    if setting_features(setting)["hybrid"]:
        return ()
    concurrency = concurrency or setting.scenario.concurrency
    bound_at = bound_at or _bound_at(setting, two_stage_bound)
    if bound_at is None:
        return ()
    table = []
    for rows in _multi_row_buckets(concurrency):
        best = bound_at(rows)
        if best["ratio"] <= 1.0:  # a table's entries hold for every larger bucket: start over
            table = []
            continue
        entry = (rows, best["two_stage_width"], best["two_stage_prefix"])
        if not table or table[-1][1:] != entry[1:]:
            table.append(entry)
    return tuple(table)


def width_bounds(setting) -> dict[int, float]:
    """Verify width -> the speedup bound at the setting's GPU, concurrency and replayed acceptance
    profile; empty without a profile or GPU ceilings (a real pair's acceptance is measured, not
    known ahead)."""
    bounds_at = width_bounds_at(setting)
    return bounds_at(setting.scenario.concurrency) if bounds_at is not None else {}


def width_bounds_at(setting):
    """``rows -> {verify width: speedup bound}`` with ``rows`` requests decoded together
    (:func:`specpilot.costmodel.phases.bound_by_width`) at the setting's GPU and replayed
    acceptance profile, both read once; None without a profile or GPU ceilings."""
    from specpilot.costmodel.phases import bound_by_width

    return _bound_at(setting, bound_by_width)


def _multi_row_buckets(concurrency: int) -> list[int]:
    """The batched engine's CUDA-graph buckets for that many rows, the single row left out."""
    from specpilot.engines.batch_rows import batch_buckets

    return [b for b in batch_buckets(concurrency) if b > 1]


def _bound_at(setting, bound):
    """``rows -> bound(target, drafter, gpu, block, rows, accept_probs)`` at the setting's GPU and
    replayed acceptance profile (read once); None without a profile or GPU ceilings."""
    from specpilot.bench.workload import load_profile
    from specpilot.costmodel.phases import _meta_model
    from specpilot.search.catalog import model_configs

    gpu, profile = GPUS.get(setting.gpu), setting.scenario.acceptance_profile
    if gpu is None or setting.drafter is None or not profile:
        return None
    target, drafter = model_configs(setting)
    block = _meta_model(drafter).block_size
    probs = load_profile(profile, block, setting.directory).probs
    return lambda rows: bound(target, drafter, gpu, block, rows, probs)
