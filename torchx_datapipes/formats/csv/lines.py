"""Where each CSV record starts: the file line of every record the CSV parser will produce.

pyarrow's CSV reader does not report line numbers, and with quoted newlines a row is not a
line. :class:`RecordLines` sees the same bytes the parser reads (it wraps the stream) and
finds record ends with numpy: a newline outside quotes (an even count of ``"`` before it) ends
a record. For every record it keeps its first line, its field count (delimiters outside quotes
plus one) and whether it is blank, the three things that decide what the parser makes of it:
a row (field count = the header's), an invalid row (reported to ``invalid_row_handler``, in
order) or nothing (an empty line, skipped).
"""

import io
from collections import deque
from typing import Any, Deque, List, Sequence, Tuple

import numpy as np
import numpy.typing as npt

_QUOTE, _NL, _CR = 34, 10, 13
_BOM = b"\xef\xbb\xbf"
_SKIP = 1 << 20
Record = Tuple[int, int, bool]  # (first line, fields, blank)
Span = Tuple[int, int, int, int, int]  # a record over the bound: first line, start, end, newlines, bytes
IntArray = npt.NDArray[np.int64]


class RecordLines:
    def __init__(self, delimiter: str, limit: int = 0) -> None:
        self.delim = ord(delimiter)
        self.limit = limit  # > 0: note every record longer than this many bytes in ``spans``
        self.spans: List[Span] = []  # (first line, start, end, newlines, bytes) of each, in order
        self.offset = 0  # bytes fed so far
        self.quotes = 0  # parity of the quotes seen so far
        self.newlines = 0  # newlines seen so far, quoted ones included
        self.line = 1  # first line of the record being read
        self.pending = 0  # its raw bytes so far
        self.fields = 1  # its fields so far
        self.last = -1  # the last byte seen
        # found records go to a deque, a thread-safe hand-over: pyarrow reads (and so feeds) on
        # its I/O thread while the consumer takes on the main thread; only the consumer touches
        # the arrays of records not yet taken (first line, fields, blank), from ``_pos`` on
        self._found: Deque[Tuple[Any, Any, Any]] = deque()
        self._lines: IntArray = np.empty(0, np.int64)
        self._fields: IntArray = np.empty(0, np.int64)
        self._blank: npt.NDArray[np.bool_] = np.empty(0, np.bool_)
        self._pos = 0

    def __len__(self) -> int:
        self._pull()
        return len(self._lines) - self._pos

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        a = np.frombuffer(chunk, np.uint8)
        nl = np.flatnonzero(a == _NL)
        q = np.flatnonzero(a == _QUOTE)
        unquoted = len(q) == 0 and self.quotes == 0  # the usual chunk: every byte is outside quotes
        end_idx = self._outside(q, nl)  # indexes into nl of the newlines ending records
        ends = nl[end_idx]
        n = len(ends)
        if n:
            starts = np.concatenate(([0], ends[:-1] + 1))
            raw_len = ends - starts
            raw_len[0] += self.pending
            before = np.where(ends > 0, a[np.maximum(ends - 1, 0)], self.last)
            blank = (raw_len == 0) | ((raw_len == 1) & (before == _CR))
            tail_from = int(ends[-1]) + 1
            if self.limit and int(raw_len.max()) > self.limit:
                for i in np.flatnonzero(raw_len > self.limit).tolist():
                    first = self.line if i == 0 else self.newlines + int(end_idx[i - 1]) + 2
                    last = self.newlines + int(end_idx[i]) + 1
                    end = self.offset + int(ends[i]) + 1  # past its newline
                    size = int(raw_len[i])
                    self.spans.append((first, end - 1 - size, end, last - first + 1, size))
            fields, tail = self._fields_of(a, q, unquoted, starts, ends, tail_from)
            fields[0] += self.fields - 1
            lines = np.concatenate(([self.line], self.newlines + end_idx[:-1] + 2))
            self._append(lines, fields, blank)
            self.line = self.newlines + int(end_idx[-1]) + 2
            self.pending, self.fields = 0, 1
        else:
            tail_from = 0
            tail = self._delimiters_from(a, q, unquoted, 0)
        self.pending += len(a) - tail_from
        self.fields += tail
        self.newlines += len(nl)
        self.quotes = (self.quotes + len(q)) & 1
        self.last = int(a[-1])
        self.offset += len(a)

    def _fields_of(
        self, a: Any, q: IntArray, unquoted: bool, starts: IntArray, ends: IntArray, tail_from: int
    ) -> Tuple[IntArray, int]:
        """Fields of each record ending in this chunk, and the delimiters after the last end."""
        if unquoted:  # one pass: delimiters summed per record, no positions array
            mask = a == self.delim
            if tail_from < len(a):
                sums = np.add.reduceat(mask, np.append(starts, tail_from), dtype=np.int64)
                return sums[:-1] + 1, int(sums[-1])
            return np.add.reduceat(mask, starts, dtype=np.int64) + 1, 0
        dl = np.flatnonzero(a == self.delim)
        dl_out = dl[self._outside(q, dl)]
        fields = np.searchsorted(dl_out, ends) - np.searchsorted(dl_out, starts) + 1
        return fields, int(np.count_nonzero(dl_out >= tail_from))

    def _delimiters_from(self, a: Any, q: IntArray, unquoted: bool, start: int) -> int:
        if unquoted:
            return int(np.count_nonzero(a[start:] == self.delim))
        dl = np.flatnonzero(a == self.delim)
        return int(np.count_nonzero(dl[self._outside(q, dl)] >= start))

    def _outside(self, quotes: IntArray, at: IntArray) -> IntArray:
        """Indexes into ``at`` of the positions outside quotes (an even count of quotes before)."""
        if len(quotes) == 0:  # the usual case: no quote in the chunk, no cumulative sum needed
            return np.arange(len(at)) if self.quotes == 0 else np.empty(0, np.int64)
        return np.flatnonzero(((np.searchsorted(quotes, at) + self.quotes) & 1) == 0)

    def _append(self, lines: Any, fields: Any, blank: Any) -> None:
        self._found.append((lines, fields, blank))  # the producer side: the deque only

    def _pull(self) -> None:
        """The consumer side: move the records found so far into the arrays."""
        if not self._found:
            return
        parts = []
        while self._found:
            parts.append(self._found.popleft())
        p = self._pos
        self._lines = np.concatenate([self._lines[p:], *(x[0] for x in parts)]).astype(np.int64, copy=False)
        self._fields = np.concatenate([self._fields[p:], *(x[1] for x in parts)]).astype(np.int64, copy=False)
        self._blank = np.concatenate([self._blank[p:], *(x[2] for x in parts)]).astype(np.bool_, copy=False)
        self._pos = 0

    def finish(self) -> None:
        if self.limit and self.pending > self.limit:  # the last record, without a newline
            inside = self.newlines - (self.line - 1)
            self.spans.append((self.line, self.offset - self.pending, self.offset, inside, self.pending))
        blank = self.pending == 0 or (self.pending == 1 and self.last == _CR)
        if not blank or self.fields > 1:
            self._append([self.line], [self.fields], [False])
        self.pending, self.fields = 0, 1

    def peek(self) -> Record:
        self._pull()
        p = self._pos
        return int(self._lines[p]), int(self._fields[p]), bool(self._blank[p])

    def pop(self) -> Record:
        rec = self.peek()
        self._pos += 1
        return rec

    def take(self, n: int, ncols: int) -> Tuple[List[int], List[Record], int]:
        """The first lines of the next ``n`` records with ``ncols`` fields (all when ``n`` < 0).

        Returns those lines, the other non-blank records passed on the way (in order) and the
        count of blank lines passed; fewer lines than ``n`` if the records run out.
        """
        self._pull()
        p = self._pos
        lines, fields, blank = self._lines[p:], self._fields[p:], self._blank[p:]
        good = ~blank & (fields == ncols)
        k = len(lines)
        if n >= 0 and k:
            cum = np.cumsum(good)
            if cum[-1] >= n:
                k = int(np.searchsorted(cum, n)) + 1 if n else 0
        good, blank = good[:k], blank[:k]
        other = np.flatnonzero(~good & ~blank)
        odd = [(int(lines[i]), int(fields[i]), False) for i in other]
        self._pos += k
        return lines[:k][good].tolist(), odd, int(np.count_nonzero(blank))


class Tee(io.RawIOBase):
    """A readable stream that shows every byte read to a :class:`RecordLines`."""

    def __init__(self, stream: Any, lines: RecordLines) -> None:
        super().__init__()
        self.stream, self.lines, self.done, self.first = stream, lines, False, True

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        data = self.stream.read(len(buf))
        n = len(data)
        if n == 0:
            if not self.done:
                self.lines.finish()
                self.done = True
            return 0
        buf[:n] = data
        seen = bytes(data)
        if self.first:  # the parser skips a UTF-8 BOM: so do the record lines (a BOM-only file is empty)
            self.first = False
            seen = seen[len(_BOM) :] if seen.startswith(_BOM) else seen
        self.lines.feed(seen)
        return n


class Without(io.RawIOBase):
    """``stream`` without the records ``spans`` (over the record bound), each replaced by its newlines.

    The parser never sees those bytes (they are skipped in bounded reads), and the newlines keep
    every later record on its file line (the parser and :class:`RecordLines` skip blank lines).
    """

    def __init__(self, stream: Any, spans: Sequence[Span]) -> None:
        super().__init__()
        self.stream, self.spans, self.pos, self.i, self.fill = stream, list(spans), 0, 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        n = len(buf)
        while True:
            if self.fill:
                k = min(self.fill, n)
                buf[:k] = b"\n" * k
                self.fill -= k
                return k
            nxt = self.spans[self.i] if self.i < len(self.spans) else None
            if nxt is not None and self.pos >= nxt[1]:
                while self.pos < nxt[2]:  # skip the record, a piece at a time
                    skipped = len(self.stream.read(min(_SKIP, nxt[2] - self.pos)))
                    if not skipped:
                        break
                    self.pos += skipped
                self.fill, self.i = nxt[3], self.i + 1
                continue
            want = n if nxt is None else min(n, nxt[1] - self.pos)
            data = self.stream.read(want)
            buf[: len(data)] = data
            self.pos += len(data)
            return len(data)
