"""NaN and infinities bound for JSON, which has no such numbers (orjson would write ``null``).

:func:`check_finite` finds the field of a record holding one, after orjson wrote a line holding
``null``; :func:`may_hold_non_finite` is the one-pass shortcut for flat records of finite floats.
"""

import math
from typing import Any

import numpy as np

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.values import find_value, is_tensor

NON_FINITE = "NaN/inf cannot be written as JSON Lines"


class NonFiniteError(DatapipesError, ValueError):
    """A NaN or infinite number in a record bound for JSON, which has no such numbers."""


def is_non_finite(v: Any) -> bool:
    """A NaN or infinite float, numpy float scalar, or float/complex array or tensor holding one."""
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, np.generic):
        return v.dtype.kind in "fc" and not bool(np.isfinite(v))
    if is_tensor(v):  # (bfloat16 too, which numpy has no dtype for)
        return (v.is_floating_point() or v.is_complex()) and not bool(v.isfinite().all())
    return isinstance(v, np.ndarray) and v.dtype.kind in "fc" and not bool(np.isfinite(v).all())


_SCALARS = frozenset({str, int, bool, type(None)})


def may_hold_non_finite(rec: Any) -> bool:
    """False when ``rec`` surely holds no NaN/inf: a flat dict of finite floats and other scalars.

    A table with missing values has ``null`` on most lines: this keeps their check to one pass
    over the values (``v - v`` is 0.0 for a finite float, NaN for NaN and the infinities); anything
    nested, an array or a tensor gets the full search.
    """
    if rec.__class__ is not dict:
        return True
    for v in rec.values():
        c = v.__class__
        if c is float:
            if v - v != 0:
                return True
        elif c not in _SCALARS:
            return True
    return False


def check_finite(rec: Any, line: bytes) -> None:
    """orjson writes NaN and inf as ``null``: a line holding ``null`` is searched for one."""
    if b"null" in line and may_hold_non_finite(rec):
        field = find_value(rec, is_non_finite)
        if field:
            raise NonFiniteError(
                f"field {field}: {NON_FINITE} (JSON has no NaN or infinity; it would become null);"
                " write --output_format parquet or webdataset, which keep them, or replace them in your"
                " function (e.g. with None)"
            )
