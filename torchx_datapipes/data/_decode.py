"""Decoded values: Arrow columns and WebDataset members to torch tensors and Python values.

Columns are converted whole (one numpy/torch call per column and chunk, never per value), then
zipped into record dicts. Tensors are copied once per chunk out of Arrow's read-only buffers:
``torch.from_numpy`` of a read-only array warns (torch tensors are always writable), and a
writable view of a buffer that pyarrow may share would let a training step corrupt it.
"""

import io
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import orjson
import pyarrow as pa
import torch

from torchx_datapipes.io.writers.arrow import column_to_numpy, is_fixed_tensor, is_variable_tensor

TEXT_EXTS = frozenset({"txt", "text"})
INT_TEXT_EXTS = frozenset({"cls", "cls2", "index", "inx", "id"})


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a if a.flags.writeable else a.copy())


def _fixed(col: pa.ChunkedArray) -> List[Any]:
    nd = column_to_numpy(col)
    rows: List[Any] = list(_tensor(np.ascontiguousarray(nd)).unbind(0))
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


def table_records(table: pa.Table) -> List[Dict[str, Any]]:
    names = table.column_names
    cols = [column_values(table.column(i)) for i in range(table.num_columns)]
    if not cols:
        return [{} for _ in range(table.num_rows)]
    return [dict(zip(names, row)) for row in zip(*cols)]


def member_field(suffix: str) -> str:
    """The record field a member ``<key>.<suffix>`` holds (the writer's ``.npy``/``.json`` dropped)."""
    head, dot, last = suffix.rpartition(".")
    return head if dot and last in ("npy", "json") else suffix


def member_value(suffix: str, data: bytes) -> Any:
    last = suffix.rsplit(".", 1)[-1]
    if last == "npy":
        return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
    if last == "json":
        return orjson.loads(data)
    if last in TEXT_EXTS:
        return data.decode()
    if last in INT_TEXT_EXTS:
        text = data.decode()
        try:
            return int(text)
        except ValueError:
            return text
    return data


def project(rec: Dict[str, Any], columns: Optional[Sequence[str]]) -> Dict[str, Any]:
    if columns is None:
        return rec
    return {c: rec.get(c) for c in columns}
