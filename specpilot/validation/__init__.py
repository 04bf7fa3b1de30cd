"""Token forcing: the gate in front of every speed number (DESIGN.md §4).

Search agents never write here; a candidate engine is only ever *judged* by this code.
"""

from specpilot.validation.forcing import Report
from specpilot.validation.forcing import validate_engine

__all__ = ["Report", "validate_engine"]
