"""Arrow columns as Python values, tensors for our tensor layouts: what Parquet parts hold, read back.

One conversion for both readers of a Parquet output: ``OutputDataset`` (formats/parquet/records.py) and the
next job's ``--input`` (formats/parquet/input.py), so both see the same values and types.

Columns are converted whole (one numpy/torch call per column and chunk, never per value).
Fixed-shape numeric tensor columns without nulls are zero-copy: the chunk's Arrow buffer becomes
one torch tensor through DLPack (``torch.from_numpy`` of Arrow's read-only numpy view would
warn), and each record gets a row view of it. The buffer belongs to this chunk's read alone, so
nothing else sees a write to it. Bool (bit-packed in Arrow), columns with nulls, and the variable
layout are converted with a copy.
"""

from typing import Any, List, Optional

import numpy as np
import pyarrow as pa
import torch

from torchx_datapipes.formats.parquet.types import (
    column_to_numpy,
    is_0d_field,
    is_fixed_tensor,
    is_variable_tensor,
)


def has_tensors(schema: pa.Schema) -> bool:
    """Whether a schema has a column of one of our tensor layouts (0-d ones included)."""
    return any(is_fixed_tensor(f.type) or is_variable_tensor(f.type) or is_0d_field(f) for f in schema)


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a if a.flags.writeable else a.copy())


def _zero_copy(arr: pa.Array) -> Optional[torch.Tensor]:
    """One chunk of a fixed-shape column as a ``(N, *shape)`` tensor sharing Arrow's buffer, or None."""
    t = arr.type
    if arr.null_count or pa.types.is_boolean(t.value_type):
        return None
    size = t.storage_type.list_size
    values = arr.storage.values.slice(arr.offset * size, len(arr) * size)
    if values.null_count:
        return None
    try:
        flat = torch.from_dlpack(values)
    except (BufferError, TypeError, ValueError, RuntimeError):
        return None
    return flat.reshape(len(arr), *t.shape)


def _fixed(col: pa.ChunkedArray) -> List[Any]:
    rows: List[Any] = []
    for arr in col.chunks:  # per Arrow chunk: combining them would copy
        whole = _zero_copy(arr)
        if whole is None:
            whole = _tensor(np.ascontiguousarray(column_to_numpy(arr)))
        rows.extend(whole.unbind(0))
    if col.null_count:
        for i in np.flatnonzero(np.asarray(col.is_null())):
            rows[i] = None
    return rows


def _zero_d(col: pa.ChunkedArray) -> List[Any]:
    """A plain column marked as 0-d tensors: one 0-d tensor per row (None for null rows)."""
    if col.null_count:
        dtype = col.type.to_pandas_dtype()
        return [None if v is None else torch.from_numpy(np.array(v, dtype=dtype)) for v in col.to_pylist()]
    return list(_tensor(np.array(col.to_numpy(zero_copy_only=False))).unbind(0))


def column_values(col: pa.ChunkedArray, field: Optional[pa.Field] = None) -> List[Any]:
    """One Python value per row: tensors for the tensor layouts, else ``to_pylist()`` values.

    ``field``: the column's schema field, whose metadata marks a plain column of 0-d tensors.
    """
    if field is not None and is_0d_field(field):
        return _zero_d(col)
    t = col.type
    if is_fixed_tensor(t):
        return _fixed(col)
    if is_variable_tensor(t):
        return [None if a is None else _tensor(a) for a in column_to_numpy(col)]
    values: List[Any] = col.to_pylist()
    return values
