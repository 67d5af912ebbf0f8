"""Records of a chunk: :class:`Columns` (values by column, made into dicts only when served)."""

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

__all__ = ["Columns", "project"]


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


def project(rec: Dict[str, Any], columns: Optional[Sequence[str]]) -> Dict[str, Any]:
    if columns is None:
        return rec
    return {c: rec.get(c) for c in columns}
