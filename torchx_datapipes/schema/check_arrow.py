"""Check a typed Arrow record batch (CSV, Parquet) against a schema with Arrow compute kernels.

Each column has one Arrow type, so the type rule is one comparison per batch; nulls, NaN, range
and domain rules are vectorised masks. Columns of other types (lists, structs, tensors...) go
through :meth:`RecordChecker.check_column` on their Python values, as the stats op does.
"""

from __future__ import annotations

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
            mask = _np(pc.is_valid(col))
            if kind == "string" and checker.kinds[name] & {"int", "float"}:  # a number column with text in it
                wrong = np.array([v is not None and not _is_number(v) for v in col.to_pylist()], dtype=bool)
                mask = wrong if wrong.any() else mask
            _add(found, name, "type_mismatch", mask, col, locate)
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


def _numeric(checker: RecordChecker, name: str, col: Any, kind: str, locate: Locate) -> None:
    fs = checker.schema.fields[name]
    if fs.allow_nan and fs.allow_inf and fs.min is None and fs.max is None:
        return
    arr = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)  # nulls become NaN
    valid = _np(pc.is_valid(col))
    finite = np.isfinite(arr)
    out = np.zeros(arr.shape, dtype=bool)
    if kind == "float" and not finite[valid].all():
        nan = np.isnan(arr) & valid
        if not fs.allow_nan and nan.any():
            _add(checker.found, name, "nan_present", nan, col, locate)
        if not fs.allow_inf:
            out |= np.isinf(arr)
    if fs.min is not None:
        out |= finite & (arr < fs.min)
    if fs.max is not None:
        out |= finite & (arr > fs.max)
    if out.any():
        _add(checker.found, name, "out_of_range", out, col, locate)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _np(mask: Any) -> Any:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _add(found: Found, name: str, kind: str, mask: Any, col: Any, locate: Locate) -> None:
    hits = np.flatnonzero(mask)
    if not hits.size:
        return
    first = hits[:5].tolist()
    values = [col[i].as_py() for i in first]
    found.add(name, kind, int(hits.size), _examples(first, values, locate))
