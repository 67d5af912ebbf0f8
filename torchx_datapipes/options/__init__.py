"""The declarative option spec (see :mod:`torchx_datapipes.options.spec`); each op's spec lives in its
op module (``torchx_datapipes/ops/``), and ``torchx_datapipes.ops.SPECS`` maps op names to them."""

from torchx_datapipes.options.spec import REQUIRED, OpSpec, Option, OptionError, parse_bool

__all__ = [
    "REQUIRED",
    "Option",
    "OpSpec",
    "OptionError",
    "parse_bool",
]
