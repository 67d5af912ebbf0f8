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
from typing import Any, Deque, Tuple

import numpy as np

_QUOTE, _NL, _CR = 34, 10, 13
Record = Tuple[int, int, bool]  # (first line, fields, blank)


class RecordLines:
    def __init__(self, delimiter: str) -> None:
        self.delim = ord(delimiter)
        self.quotes = 0  # parity of the quotes seen so far
        self.newlines = 0  # newlines seen so far, quoted ones included
        self.line = 1  # first line of the record being read
        self.pending = 0  # its raw bytes so far
        self.fields = 1  # its fields so far
        self.last = -1  # the last byte seen
        self.queue: Deque[Record] = deque()

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        a = np.frombuffer(chunk, np.uint8)
        cq = np.cumsum(a == _QUOTE, dtype=np.int64) + self.quotes
        nl = np.flatnonzero(a == _NL)
        dl = np.flatnonzero(a == self.delim)
        dl_out = dl[(cq[dl] & 1) == 0]
        end_idx = np.flatnonzero((cq[nl] & 1) == 0)  # indexes into nl of the newlines ending records
        ends = nl[end_idx]
        n = len(ends)
        if n:
            starts = np.concatenate(([0], ends[:-1] + 1))
            raw_len = ends - starts
            raw_len[0] += self.pending
            before = np.where(ends > 0, a[np.maximum(ends - 1, 0)], self.last)
            blank = (raw_len == 0) | ((raw_len == 1) & (before == _CR))
            fields = np.searchsorted(dl_out, ends) - np.searchsorted(dl_out, starts) + 1
            fields[0] += self.fields - 1
            lines = np.concatenate(([self.line], self.newlines + end_idx[:-1] + 2))
            self.queue.extend(zip(lines.tolist(), fields.tolist(), blank.tolist()))
            tail_from = int(ends[-1]) + 1
            self.line = self.newlines + int(end_idx[-1]) + 2
            self.pending, self.fields = 0, 1
        else:
            tail_from = 0
        self.pending += len(a) - tail_from
        self.fields += int(np.count_nonzero(dl_out >= tail_from))
        self.newlines += len(nl)
        self.quotes = int(cq[-1] & 1)
        self.last = int(a[-1])

    def finish(self) -> None:
        blank = self.pending == 0 or (self.pending == 1 and self.last == _CR)
        if not blank or self.fields > 1:
            self.queue.append((self.line, self.fields, False))
        self.pending, self.fields = 0, 1

    def pop(self) -> Record:
        return self.queue.popleft()


class Tee(io.RawIOBase):
    """A readable stream that shows every byte read to a :class:`RecordLines`."""

    def __init__(self, stream: Any, lines: RecordLines) -> None:
        super().__init__()
        self.stream, self.lines, self.done = stream, lines, False

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
        self.lines.feed(bytes(data))
        return n
