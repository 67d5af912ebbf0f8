"""Work units (kept for its import path): see :mod:`torchx_datapipes.io.inputs.planning`."""

from torchx_datapipes.io.inputs.planning import PlannedInput, assign, plan_units
from torchx_datapipes.io.inputs.unit import DEFAULT_UNIT_MB, Unit

__all__ = ["DEFAULT_UNIT_MB", "PlannedInput", "Unit", "assign", "plan_units"]
