"""Chunks decoded progressively: the rows of a chunk asked for in increasing order.

In the epoch order a chunk's rows are consecutive (chunks are permuted whole, then windows are
cut), so the segments that need a chunk ask for increasing row ranges of it. A
:class:`ChunkStream` decodes just far enough for each request and keeps only the rows not yet
asked for: a window's first records need the part of a row group that the window covers, not
the whole group, and no more than about a window of rows is held.
"""

from typing import Callable, Dict, Iterator, List

import numpy as np

from torchx_datapipes.data._order import distinct
from torchx_datapipes.formats.records import Columns

OpenStream = Callable[[int], Iterator[Columns]]  # start row -> the chunk's rows from there on


class ChunkStream:
    def __init__(self, open_stream: OpenStream, start: int) -> None:
        self._open = open_stream
        self._start(start)

    def _start(self, row: int) -> None:
        self._it = self._open(row)
        self._buf: List[Columns] = []
        self._first = self._end = row  # rows [first, end) are decoded and held

    def take(self, lo: int, hi: int) -> Columns:
        """Rows ``[lo, hi)``; rows before ``lo`` are dropped (asking for them again reopens)."""
        if lo < self._first:
            self.close()
            self._start(lo)
        while self._end < hi:
            piece = next(self._it)
            self._buf.append(piece)
            self._end += piece.num_rows
        held = Columns.concat(self._buf)
        out = held.slice(lo - self._first, hi - self._first)
        self._buf = [held.slice(hi - self._first, self._end - self._first)]
        self._first = hi
        return out

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


def gather(streams: Dict[int, ChunkStream], chunk_ids: np.ndarray, rows: np.ndarray) -> Columns:
    """The records at ``(chunk_ids[k], rows[k])`` in that order, taken from the chunks' streams.

    Streams of chunks this segment does not use are closed and dropped from ``streams``.
    """
    pieces: Dict[int, Columns] = {}
    local = rows.copy()
    for c in distinct(chunk_ids):
        mask = chunk_ids == c
        lo, hi = int(rows[mask].min()), int(rows[mask].max()) + 1
        pieces[c] = streams[c].take(lo, hi)
        local[mask] -= lo
    for c in [c for c in streams if c not in pieces]:
        streams.pop(c).close()
    if len(pieces) == 1:
        (only,) = pieces.values()
        if np.array_equal(local, np.arange(len(local))):
            return only  # in order: the rows as decoded
        return only.take(local.tolist())
    first = next(iter(pieces.values()))
    ids, idx = chunk_ids.tolist(), local.tolist()
    values = tuple([pieces[c].values[k][r] for c, r in zip(ids, idx)] for k in range(len(first.names)))
    return Columns(first.names, values, len(ids))
