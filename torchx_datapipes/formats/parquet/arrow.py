"""Records to Arrow columns, and one schema for many parts (see docs/tensors.md for the layout).

- scalars keep their width: numpy ``int8``/``float32``/... scalars stay int8/float32, Python
  ints are int64, floats double; ``Decimal`` is decimal128 (decimal256 beyond 38 digits; NaN and
  infinities refused), ``datetime`` timestamp[us] (an aware one with its zone: ``tz=Europe/Paris``,
  ``tz=+05:30``, ``tz=UTC``), ``date`` date32, naive ``time`` time64[us], ``bytes`` binary; a column
  holds one kind of date/time and one time zone, and a ``time`` with a time zone is refused (Arrow
  would convert them silently; see ``_check_temporal``);
- a column whose values are arrays/tensors of one shape is ``arrow.fixed_shape_tensor`` of their
  dtype (0-d ones: a plain column of the dtype, its field marked ``{"torchx_datapipes.tensor":
  "0d"}`` so that our readers give 0-d tensors back and other readers see plain numbers);
- arrays of different shapes are the variable layout ``struct<data: list<T>, shape: list<int32>>``
  (row-major ``data``);
- a field missing from some records is null there (every record's keys count, not the first's).

:func:`unify` merges schemas with Arrow's permissive widening (int + float -> double, null + string
-> string) plus the tensor rules (fixed shapes that differ -> variable layout); :func:`conform`
casts a table to the unified schema.
"""

import datetime
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from torchx_datapipes.formats.parquet.types import (
    SHAPE_TYPE,
    TENSOR_KEY,
    ZERO_D,
    column_to_numpy,
    is_0d_field,
    is_fixed_tensor,
    is_variable_tensor,
    tensor_value_type,
    variable_tensor_type,
)
from torchx_datapipes.io.values import as_array, find_value

__all__ = [
    "SHAPE_TYPE", "TENSOR_KEY", "ZERO_D", "column_to_numpy", "conform", "is_0d_field", "is_fixed_tensor",
    "is_variable_tensor", "merge_types", "tensor_value_type", "to_column", "to_table", "unify",
    "variable_tensor_type",
]  # fmt: skip


def _array_column(arrays: List[Optional[np.ndarray]]) -> pa.Array:
    present = [a for a in arrays if a is not None]
    dtype = np.result_type(*[a.dtype for a in present])
    if dtype.kind not in "biuf":
        raise TypeError(f"arrays of dtype {dtype} cannot be written as tensors; use a numeric or bool dtype")
    shapes = {a.shape for a in present}
    mask = np.array([a is None for a in arrays])
    if len(shapes) == 1 and (present[0].size or not present[0].ndim):  # Arrow has no 0-size fixed shape
        shape = present[0].shape
        filler = np.zeros(shape, dtype)
        stacked = np.stack([filler if a is None else a.astype(dtype, copy=False) for a in arrays])
        if not shape:  # 0-d: a plain column of the dtype
            return pa.array(stacked, mask=mask if mask.any() else None)
        size = int(np.prod(shape))
        flat = pa.array(stacked.reshape(-1))
        storage = pa.FixedSizeListArray.from_arrays(flat, size, mask=pa.array(mask) if mask.any() else None)
        return pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(flat.type, list(shape)), storage)
    return _variable(arrays, dtype, mask)


def _variable(arrays: Sequence[Optional[np.ndarray]], dtype: np.dtype, mask: np.ndarray) -> pa.Array:
    empty = np.empty(0, dtype)
    flat = np.concatenate(
        [empty, *[np.ascontiguousarray(a, dtype).reshape(-1) for a in arrays if a is not None]]
    )
    sizes = np.array([0 if a is None else a.size for a in arrays], dtype=np.int64)
    offsets = pa.array(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32))
    data = pa.ListArray.from_arrays(offsets, pa.array(flat))
    shape = pa.array([None if a is None else list(a.shape) for a in arrays], type=SHAPE_TYPE)
    t = variable_tensor_type(data.type.value_type)
    return pa.StructArray.from_arrays([data, shape], fields=list(t), mask=pa.array(mask))


def to_column(values: List[Any]) -> pa.Array:
    return _column(values)[0]


def _column(values: List[Any]) -> Tuple[pa.Array, bool]:
    """The column, and whether it holds 0-d arrays (a plain column that reads back as tensors)."""
    arrays = [None if v is None else as_array(v) for v in values]
    if any(a is not None for a in arrays) and all(a is not None or v is None for a, v in zip(arrays, values)):
        col = _array_column(arrays)
        return col, not is_fixed_tensor(col.type) and not is_variable_tensor(col.type)
    return _plain_column(values), False


def _has_temporal(t: pa.DataType) -> bool:
    if pa.types.is_temporal(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_temporal(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_temporal(t.value_type)
    return False


def _temporal_kinds(v: Any, path: str, out: Dict[str, Dict[str, None]]) -> None:
    """The kinds of dates/times in ``v`` by path (list items share one): ``date``, ``datetime``
    (naive), ``datetime UTC`` / ``datetime Europe/Paris`` (its time zone), ``time``, ``time UTC``."""
    if isinstance(v, dict):
        for k, x in v.items():
            _temporal_kinds(x, f"{path}.{k}", out)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _temporal_kinds(x, f"{path}[]", out)
    elif isinstance(v, (datetime.datetime, datetime.time)):
        kind = "datetime" if isinstance(v, datetime.datetime) else "time"
        out.setdefault(path, {})[kind if v.tzinfo is None else f"{kind} {v.tzinfo}"] = None
    elif isinstance(v, datetime.date):
        out.setdefault(path, {})["date"] = None


def _check_temporal(values: List[Any], col: pa.Array) -> None:
    """Refuse what Arrow would change silently: one column holds one kind of date/time and one time
    zone (``pa.array`` casts a datetime next to a date to a date, an aware one to the zone of the first,
    a naive one to UTC), and an Arrow time has no time zone."""
    if not _has_temporal(col.type):
        return
    kinds: Dict[str, Dict[str, None]] = {}
    for v in values:
        _temporal_kinds(v, "", kinds)
    for path, seen in kinds.items():
        where = f"value {path.lstrip('.')}: " if path else ""
        aware_time = [k for k in seen if k.startswith("time ")]
        if aware_time:
            raise TypeError(
                f"{where}a datetime.time with a time zone ({aware_time[0][5:]}): a Parquet time has none;"
                " drop the tzinfo, use a datetime, or write --output_format jsonl or webdataset"
            )
        if len(seen) > 1:
            raise TypeError(
                f"{where}{' and '.join(seen)} values in one column: Parquet keeps one kind of date/time"
                " and one time zone per column (Arrow would convert the others); make them one kind"
            )


def _plain_column(values: List[Any]) -> pa.Array:
    try:
        col = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass  # tensors nested in dicts or lists: as numpy (1-d ones become typed lists)
    else:
        _check_temporal(values, col)
        return col
    deep = [_deep_numpy(v) for v in values]
    nested = find_value(deep, lambda x: isinstance(x, np.ndarray) and x.ndim != 1)
    if nested:
        where = nested.split("]", 1)[-1].lstrip(".") or "<value>"
        raise TypeError(
            f"value {where} is an array that is not 1-d, nested in a dict or list; Parquet keeps the"
            " shape of tensors at the top level of a record only: make it a field of its own"
        )
    col = pa.array(deep)
    _check_temporal(values, col)
    return col


def _deep_numpy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _deep_numpy(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_deep_numpy(x) for x in v]
    arr = as_array(v)
    return v if arr is None else arr


def to_table(recs: Sequence[Any]) -> pa.Table:
    rows = [r if isinstance(r, dict) else {"value": r} for r in recs]
    names: Dict[str, None] = {}
    for r in rows:
        names.update(dict.fromkeys(r))
    cols, fields = [], []
    for k in names:
        try:
            col, zero_d = _column([r.get(k) for r in rows])
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise type(e)(f"field {k}: {e}") from e
        cols.append(col)
        fields.append(pa.field(str(k), col.type, metadata=ZERO_D if zero_d else None))
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def merge_types(a: pa.DataType, b: pa.DataType, name: str) -> pa.DataType:
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    va, vb = tensor_value_type(a), tensor_value_type(b)
    if va is not None or vb is not None:
        if va is None or vb is None:
            raise TypeError(
                f"field {name}: a tensor ({a if va else b}) in some records, {b if va else a} in others"
            )
        value = merge_types(va, vb, f"{name} (tensor values)")
        if is_fixed_tensor(a) and is_fixed_tensor(b) and a.shape == b.shape:
            return pa.fixed_shape_tensor(value, a.shape)
        return variable_tensor_type(value)
    try:
        schema = pa.unify_schemas(
            [pa.schema([(name, a)]), pa.schema([(name, b)])], promote_options="permissive"
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise TypeError(
            f"field {name}: {a} in some records, {b} in others, and Arrow cannot widen one to the other ({e})"
        ) from e
    return schema.field(name).type


def unify(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """One schema for ``schemas``: every field of any (in order of first appearance), types widened."""
    fields: Dict[str, pa.Field] = {}
    for s in schemas:
        for f in s:
            fields[f.name] = _merge_fields(fields[f.name], f) if f.name in fields else f
    return pa.schema(list(fields.values()))


def _merge_fields(a: pa.Field, b: pa.Field) -> pa.Field:
    t = merge_types(a.type, b.type, a.name)
    if pa.types.is_null(a.type) or pa.types.is_null(b.type):
        zero_d = is_0d_field(a) or is_0d_field(b)
    elif is_0d_field(a) != is_0d_field(b):
        raise TypeError(
            f"field {a.name}: a 0-d tensor in some records, a plain {b.type if is_0d_field(a) else a.type}"
            " in others; return one kind per field"
        )
    else:
        zero_d = is_0d_field(a)
    return pa.field(a.name, t, metadata=ZERO_D if zero_d else None)


def _to_variable(col: pa.ChunkedArray, target: pa.DataType) -> pa.Array:
    dtype = target.field(0).type.value_type.to_pandas_dtype()
    src = col.type
    arr = col.combine_chunks()
    if is_fixed_tensor(src):
        nd = arr.to_numpy_ndarray() if len(arr) else np.empty((0, *src.shape))
        valid = np.asarray(arr.storage.is_valid())
        arrays = [nd[i] if valid[i] else None for i in range(len(arr))]
    else:
        arrays = [None if x is None else np.asarray(x["data"]).reshape(x["shape"]) for x in arr.to_pylist()]
    mask = np.array([a is None for a in arrays], dtype=bool)
    return _variable(arrays, np.dtype(dtype), mask)


def _cast(col: pa.ChunkedArray, target: pa.DataType) -> Any:
    src = col.type
    if src == target:
        return col
    if pa.types.is_null(src):
        return pa.nulls(len(col), target)
    if is_variable_tensor(target):
        return _to_variable(col, target)
    if is_fixed_tensor(target):
        chunks = [
            pa.ExtensionArray.from_storage(target, c.storage.cast(target.storage_type)) for c in col.chunks
        ]
        return pa.chunked_array(chunks, type=target)
    return col.cast(target)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s fields and types (missing fields are null)."""
    n = table.num_rows
    cols = []
    for f in schema:
        if f.name not in table.column_names:
            cols.append(pa.nulls(n, f.type))
            continue
        col = table.column(f.name)
        try:
            cols.append(_cast(col, f.type))
        except (pa.ArrowException, ValueError) as e:
            raise TypeError(f"field {f.name}: cannot cast {col.type} to {f.type}: {e}") from e
    return pa.Table.from_arrays(cols, schema=schema)
