"""The gap table of one measured engine: per phase, measured ms vs the cost model's floor, and a
calibrated prediction.

Floor: bytes over the read ceiling (or FLOPs over the bf16 rate) of the phase — what no kernel can
beat. Prediction: the floor scaled by the efficiency the *AR step* of the same engine build reaches
on this GPU (measured AR ms / AR floor), i.e. "this phase would run as close to its ceiling as
plain decoding does". A phase whose measured time exceeds its prediction is where the engine wastes
more than AR does — the campaign pushes there first. ``prediction_error`` says how far the
calibrated model is from the measurement (the acceptance check asks for 20%).
"""

from specpilot.costmodel import GPUS
from specpilot.costmodel import engine_costs
from specpilot.costmodel import gap_table


def gap_rows(setting, features: dict, measured: dict, recipe, context: int = 512) -> list[dict]:
    """Rows {phase, measured_ms, floor_ms, gap, excess_ms[, predicted_ms, prediction_error]}."""
    from specpilot.search.catalog import model_configs

    if measured.get("state") not in (None, "ok") or not measured.get("phases_ms"):
        return []
    gpu = GPUS.get(setting.gpu)
    if gpu is None:
        return []
    target, drafter = model_configs(setting)
    block = recipe.block_size or features.get("block_size") or 1
    costs = engine_costs(target, drafter if recipe.speculative else None, gpu, block, context,
                         recipe.gdn_rollback)
    phases = dict(measured["phases_ms"])
    if not recipe.speculative:
        phases = {"ar": phases.get("verify", 0.0)}
    rows = gap_table(costs, {k: v for k, v in phases.items() if k in costs})
    ar_ms = measured.get("ar_ms_per_step")
    if ar_ms and costs["ar"].floor_ms > 0:
        efficiency = ar_ms / costs["ar"].floor_ms  # >= 1: how far AR sits above its floor
        for row in rows:
            row["predicted_ms"] = row["floor_ms"] * efficiency
            row["prediction_error"] = (row["predicted_ms"] - row["measured_ms"]) / \
                row["measured_ms"] if row["measured_ms"] else None
        rows.sort(key=lambda r: -(r["measured_ms"] - r["predicted_ms"]))
    return rows
