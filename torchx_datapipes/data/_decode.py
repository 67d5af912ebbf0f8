"""Decoded values: Arrow columns and WebDataset members to torch tensors and Python values.

Columns are converted whole (one numpy/torch call per column and chunk, never per value), then
zipped into record dicts. Fixed-shape numeric tensor columns without nulls are zero-copy: the
chunk's Arrow buffer becomes one torch tensor through DLPack (``torch.from_numpy`` of Arrow's
read-only numpy view would warn), and each record gets a row view of it. The buffer belongs to
this chunk's read alone, so nothing else sees a write to it. Bool (bit-packed in Arrow), columns
with nulls, and the variable layout are converted with a copy.
"""

import io
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import orjson
import pyarrow as pa
import torch

from torchx_datapipes.io.writers.arrow import column_to_numpy, is_fixed_tensor, is_variable_tensor

TEXT_EXTS = frozenset({"txt", "text"})
INT_TEXT_EXTS = frozenset({"cls", "cls2", "index", "inx", "id"})


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


@dataclass(frozen=True)
class Columns:
    """A chunk's records as columns: ``names`` and one list of values per name.

    Records are made from it only when served (``records``), so a chunk read ahead holds one
    object per value, not one dict per record as well (fewer objects for the garbage collector).
    """

    names: Tuple[str, ...]
    values: Tuple[List[Any], ...]
    num_rows: int

    def take(self, rows: Sequence[int]) -> "Columns":
        return Columns(self.names, tuple([col[r] for r in rows] for col in self.values), len(rows))

    def records(self) -> Iterator[Dict[str, Any]]:
        names = self.names
        if not names:
            return iter([{} for _ in range(self.num_rows)])
        return (dict(zip(names, vals)) for vals in zip(*self.values))


def table_columns(table: pa.Table) -> Columns:
    cols = tuple(column_values(table.column(i)) for i in range(table.num_columns))
    return Columns(tuple(table.column_names), cols, table.num_rows)


def table_records(table: pa.Table) -> List[Dict[str, Any]]:
    return list(table_columns(table).records())


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
