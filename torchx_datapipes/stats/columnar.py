"""Columnar statistics: Arrow record batches fed to the per-field accumulators as numpy arrays.

The stats op takes this path when its input is a typed columnar format (CSV, Parquet) and no
user function changes the records. It must give the same profile as the per-record path
(``FieldAcc.update`` over the values ``RecordBatch.to_pylist()`` would give), so each Arrow
type maps to what its Python values would be counted as: integers as ``int``, floating point
as ``float`` (NaN too), ``bool``, strings, ``date32`` as ``date`` and timezone-naive timestamps
of second to microsecond resolution as ``datetime`` (epoch seconds computed exactly as
:func:`typed.epoch_seconds` does). Nulls count as ``null``. Any other type (lists, structs,
decimals, dictionaries, aware or nanosecond timestamps...) goes through ``to_pylist()`` and the
per-record code for that column, so the two paths agree by construction there.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from torchx_datapipes.stats.field import FieldAcc
from torchx_datapipes.stats.moments import FloatArray
from torchx_datapipes.stats.typed import TemporalAcc

_DAY_S = 86400.0
_SAMPLE = 1024  # strings looked at to choose how to count a column's values
_TIME_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}  # to microseconds


def update_field(acc: FieldAcc, col: Any) -> None:
    """Add one column of a record batch (a ``pyarrow.Array``) to ``acc``."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    n = len(col)
    if n == 0:
        return
    t = col.type
    kind = _kind(t)
    if kind is None:
        acc.update(col.to_pylist())
        return
    nulls = col.null_count
    if nulls:
        acc.types["null"] += nulls
        col = pc.drop_null(col)
    m = len(col)
    if m == 0:
        return
    acc.types[kind] += m
    if kind in ("int", "float"):
        acc._numeric().update(_floats(col))
    elif kind == "bool":
        acc.true += int(pc.sum(col.cast(pa.int64())).as_py() or 0)
    elif kind == "string":
        _strings(acc, col)
    elif kind == "date":
        if acc.date is None:
            acc.date = TemporalAcc(acc.config, date_only=True)
        acc.date.update_seconds(col.cast(pa.int32()).to_numpy().astype(np.float64) * _DAY_S)
    else:
        if acc.datetime is None:
            acc.datetime = TemporalAcc(acc.config)
        acc.datetime.update_seconds(_epoch_seconds(col))


def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_timestamp(t) and t.tz is None and t.unit in _TIME_UNITS:
        return "datetime"
    return None


def _floats(col: Any) -> FloatArray:
    """float64 values, converted as ``float(v)`` converts a Python int (round to nearest)."""
    # a copy: a zero-copy view is read-only, and the sketches take writable arrays only
    return np.array(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def _strings(acc: FieldAcc, col: Any) -> None:
    lengths = pc.utf8_length(col).to_numpy(zero_copy_only=False).astype(np.float64)
    acc._string().update_counted(lengths, _counts(col))


def _counts(col: Any) -> dict[str, int]:
    """Count per distinct string, in first-seen order (as ``Counter`` gives, either way).

    Arrow's hash kernel wins by far on few distinct values; on nearly unique ones a ``Counter``
    of the Python strings (which the sketches need anyway) is ~3x faster. A sample decides.
    """
    sample = col.slice(0, _SAMPLE).to_pylist()
    if len(col) > _SAMPLE and len(set(sample)) > _SAMPLE // 2:
        return Counter(col.to_pylist())
    vc = pc.value_counts(col)
    return dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist(), strict=True))


def _epoch_seconds(col: Any) -> FloatArray:
    """Microseconds since the epoch / 1e6: what ``(v - epoch).total_seconds()`` gives per value."""
    scale = _TIME_UNITS[col.type.unit]
    us = col.cast(pa.int64()).to_numpy().astype(np.int64) * scale
    return us.astype(np.float64) / 1e6


def update_partial_fields(fields: dict[str, FieldAcc], make: Any, batch: Any) -> None:
    """Each column of ``batch`` into ``fields[name]`` (``make(name)`` creates one, or None to skip)."""
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        acc = fields.get(name)
        if acc is None:
            acc = make(name)
            if acc is None:
                continue
        update_field(acc, col)
