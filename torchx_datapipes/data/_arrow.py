"""Arrow columns to torch tensors and Python values (Parquet outputs; needs pyarrow).

Columns are converted whole (one numpy/torch call per column and chunk, never per value), then
zipped into record dicts. Fixed-shape numeric tensor columns without nulls are zero-copy: the
chunk's Arrow buffer becomes one torch tensor through DLPack (``torch.from_numpy`` of Arrow's
read-only numpy view would warn), and each record gets a row view of it. The buffer belongs to
this chunk's read alone, so nothing else sees a write to it. Bool (bit-packed in Arrow), columns
with nulls, and the variable layout are converted with a copy.
"""

from typing import Any, Dict, List, Optional

import numpy as np
import pyarrow as pa
import torch

from torchx_datapipes.data._decode import Columns
from torchx_datapipes.io.writers.arrow import column_to_numpy, is_fixed_tensor, is_variable_tensor


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


def column_values(col: pa.ChunkedArray) -> List[Any]:
    """One Python value per row: tensors for the tensor layouts, else ``to_pylist()`` values."""
    t = col.type
    if is_fixed_tensor(t):
        return _fixed(col)
    if is_variable_tensor(t):
        return [None if a is None else _tensor(a) for a in column_to_numpy(col)]
    values: List[Any] = col.to_pylist()
    return values


def table_columns(table: pa.Table) -> Columns:
    cols = tuple(column_values(table.column(i)) for i in range(table.num_columns))
    return Columns(tuple(table.column_names), cols, table.num_rows)


def table_records(table: pa.Table) -> List[Dict[str, Any]]:
    return list(table_columns(table).records())
