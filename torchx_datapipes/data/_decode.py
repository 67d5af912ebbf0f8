"""Decoded values without pyarrow: column chunks as records, WebDataset members as values."""

import io
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import orjson
import torch

TEXT_EXTS = frozenset({"txt", "text"})
INT_TEXT_EXTS = frozenset({"cls", "cls2", "index", "inx", "id"})


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

    def slice(self, a: int, b: int) -> "Columns":
        return Columns(self.names, tuple(col[a:b] for col in self.values), max(0, min(b, self.num_rows) - a))

    @staticmethod
    def concat(pieces: Sequence["Columns"]) -> "Columns":
        if len(pieces) == 1:
            return pieces[0]
        names = pieces[0].names
        values = tuple([v for p in pieces for v in p.values[k]] for k in range(len(names)))
        return Columns(names, values, sum(p.num_rows for p in pieces))

    def records(self) -> Iterator[Dict[str, Any]]:
        names = self.names
        if not names:
            return iter([{} for _ in range(self.num_rows)])
        return (dict(zip(names, vals)) for vals in zip(*self.values))


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
