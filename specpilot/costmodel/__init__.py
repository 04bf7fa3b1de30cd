"""Cost model: bytes and FLOPs per decode phase from the model configs, GPU ceilings, the bound
speedup for an acceptance profile, and the gap table (measured vs floor) that tells a campaign where
an engine is farthest from its hardware ceiling (DESIGN.md §6)."""

from specpilot.costmodel.gpus import GPUS
from specpilot.costmodel.gpus import Gpu
from specpilot.costmodel.phases import PhaseCost
from specpilot.costmodel.phases import engine_costs
from specpilot.costmodel.phases import gap_table
from specpilot.costmodel.phases import speedup_bound

__all__ = ["GPUS", "Gpu", "PhaseCost", "engine_costs", "gap_table", "speedup_bound"]
