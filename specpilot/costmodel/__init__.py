"""Cost model: bytes and FLOPs per decode phase from the model configs, GPU ceilings, kernels per
phase and their fixed cost, the bound speedup for an acceptance profile, and the gap table (measured
vs floor and vs the calibrated prediction) that tells a campaign where an engine is farthest from
its hardware ceiling (DESIGN.md §6)."""

from specpilot.costmodel.fixed import measure_fixed_ms
from specpilot.costmodel.gpus import GPUS
from specpilot.costmodel.gpus import Gpu
from specpilot.costmodel.launches import kernel_counts
from specpilot.costmodel.launches import measure_launch_us
from specpilot.costmodel.phases import PhaseCost
from specpilot.costmodel.phases import admission_ms
from specpilot.costmodel.phases import bandwidth_efficiency
from specpilot.costmodel.phases import engine_costs
from specpilot.costmodel.phases import gap_table
from specpilot.costmodel.phases import predicted_ms
from specpilot.costmodel.phases import prefill_ms
from specpilot.costmodel.phases import snapshot_traffic_ms
from specpilot.costmodel.phases import speedup_bound

__all__ = ["GPUS", "Gpu", "PhaseCost", "admission_ms", "bandwidth_efficiency", "engine_costs", "gap_table",
           "kernel_counts", "measure_fixed_ms", "measure_launch_us", "predicted_ms", "prefill_ms",
           "snapshot_traffic_ms", "speedup_bound"]
