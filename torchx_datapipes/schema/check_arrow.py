"""Check a typed Arrow record batch (CSV, Parquet) against a schema with Arrow compute kernels.

Each column has one Arrow type, so the type rule is one comparison per batch; nulls, NaN, range
and domain rules are vectorised masks. Columns of other types (lists, structs, tensors...) go
through :meth:`RecordChecker.check_column` on their Python values, as the stats op does.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from torchx_datapipes.schema.anomalies import Found
from torchx_datapipes.schema.check import ABSENT, Locate, RecordChecker, _examples
from torchx_datapipes.stats.columnar import _kind


def check_arrow(checker: RecordChecker, batch: Any, locate: Locate, only: Optional[list[str]] = None) -> None:
    """Check one ``pyarrow.RecordBatch``; anomalies go to ``checker.found``.

    ``only``: check just these fields (schema fields and new ones), e.g. :func:`fast.suspects`.
    """
    names = batch.schema.names
    n = batch.num_rows
    found = checker.found
    wanted = set(names) | set(checker.schema.fields) if only is None else set(only)
    for name in names:
        if name not in checker.known and name in wanted:
            col = batch.column(name)
            mask = _np(pc.is_valid(col))
            _add(found, name, "new_field", mask, col, locate)
    for name, fs in checker.schema.fields.items():
        if name not in wanted:
            continue
        if name not in names:
            if fs.required and n:
                found.add(name, "missing_field", n, _examples(range(min(n, 5)), [ABSENT] * min(n, 5), locate))
            continue
        col = batch.column(name)
        kind = _kind(col.type)
        if kind is None:
            checker.check_column(name, col.to_pylist(), locate)
            continue
        if col.null_count and fs.required:
            _add(found, name, "missing_field", _np(pc.is_null(col)), col, locate)
        if fs.type and kind not in checker.kinds[name]:
            if kind == "string" and checker.kinds[name] & {"int", "float"}:
                _number_text(checker, name, col, locate)
                continue
            if kind == "float" and "int" in checker.kinds[name]:
                _fractions(checker, name, col, locate)
                continue
            _add(found, name, "type_mismatch", _np(pc.is_valid(col)), col, locate)
            continue
        if kind in ("int", "float"):
            _numeric(checker, name, col, kind, locate)
        elif kind == "string" and name in checker.domains:
            domain = pa.array(sorted(checker.domains[name]), type=pa.string())
            inside = pc.is_in(col.cast(pa.string()), value_set=domain)
            mask = _np(pc.and_(pc.invert(inside), pc.is_valid(col)))
            if mask.any():
                _add(found, name, "unexpected_values", mask, col, locate)
                item = found.get(name, "unexpected_values")
                assert item is not None
                Found._add_values(item["values"], pc.filter(col, pa.array(mask)).to_pylist())


def _numeric(
    checker: RecordChecker, name: str, col: Any, kind: str, locate: Locate, shown: Any = None
) -> None:
    """Range, NaN and ±inf rules of a numeric column; examples show ``shown`` (default: ``col``)."""
    fs = checker.schema.fields[name]
    shown = col if shown is None else shown
    if fs.allow_nan and fs.allow_inf and fs.min is None and fs.max is None:
        return
    arr = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)  # nulls become NaN
    valid = _np(pc.is_valid(col))
    finite = np.isfinite(arr)
    out = np.zeros(arr.shape, dtype=bool)
    if kind == "float" and not finite[valid].all():
        nan = np.isnan(arr) & valid
        if not fs.allow_nan and nan.any():
            _add(checker.found, name, "nan_present", nan, shown, locate)
        if not fs.allow_inf:
            out |= np.isinf(arr)
    if fs.min is not None:
        out |= finite & (arr < fs.min)
    if fs.max is not None:
        out |= finite & (arr > fs.max)
    if out.any():
        _add(checker.found, name, "out_of_range", out, shown, locate)


def _number_text(checker: RecordChecker, name: str, col: Any, locate: Locate) -> None:
    """A number column read as text: one word in the file types the whole column ``string`` in every
    batch, so each cell is judged by its text. Only the cells that are not numbers of the schema's
    type are ``type_mismatch`` (one word: one anomaly, its line and value); the numbers among them
    still get the numeric rules (range, NaN, ±inf), as they would in a clean file."""
    allowed = checker.kinds[name]
    texts = col.to_pylist()
    nums: list[float | None] = [None] * len(texts)
    wrong = np.zeros(len(texts), dtype=bool)
    for i, v in enumerate(texts):
        if v is None:
            continue
        kind, num = _text_number(v)
        if kind is None or kind not in allowed:
            wrong[i] = True
        else:
            nums[i] = num
    _add(checker.found, name, "type_mismatch", wrong, col, locate)
    if any(n is not None for n in nums):
        _numeric(checker, name, pa.array(nums, type=pa.float64()), "float", locate, shown=col)


def _fractions(checker: RecordChecker, name: str, col: Any, locate: Locate) -> None:
    """An int column read as float (one ``12.5`` in the file types the whole column ``double``): only
    the values that are not whole numbers are ``type_mismatch``; the others get the numeric rules."""
    arr = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    valid = _np(pc.is_valid(col))
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(arr) & (np.floor(arr) == arr)
    wrong = valid & ~whole
    _add(checker.found, name, "type_mismatch", wrong, col, locate)
    if (valid & whole).any():
        _numeric(checker, name, pc.if_else(pa.array(wrong), pa.scalar(None, col.type), col), "int", locate)


def _text_number(text: str) -> tuple[str | None, float]:
    """``("int" | "float", value)`` of a number's text, ``(None, nan)`` for anything else."""
    try:
        value = float(text)  # an integer beyond float's range reads as ±inf, never raises
    except ValueError:
        return None, math.nan
    try:
        int(text)
    except ValueError:
        return "float", value
    return "int", value


def _np(mask: Any) -> Any:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _add(found: Found, name: str, kind: str, mask: Any, col: Any, locate: Locate) -> None:
    hits = np.flatnonzero(mask)
    if not hits.size:
        return
    first = hits[:5].tolist()
    values = [col[i].as_py() for i in first]
    found.add(name, kind, int(hits.size), _examples(first, values, locate))
