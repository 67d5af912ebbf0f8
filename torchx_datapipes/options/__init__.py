"""One declarative option spec per op (see :mod:`torchx_datapipes.options.spec`)."""

from torchx_datapipes.options.ops import DEFAULT_MAX_ERROR_RATE, SPECS, SPLIT, STATS, TRANSFORM
from torchx_datapipes.options.spec import REQUIRED, OpSpec, Option, OptionError, parse_bool

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "REQUIRED",
    "SPECS",
    "SPLIT",
    "STATS",
    "TRANSFORM",
    "Option",
    "OpSpec",
    "OptionError",
    "parse_bool",
]
