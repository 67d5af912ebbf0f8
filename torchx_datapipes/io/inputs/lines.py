"""Line formats: JSON Lines (a JSON object per line) and text (a ``str`` per line).

Uncompressed files are cut into line-aligned byte ranges; a line belongs to the unit its
first byte is in. Line numbers are unit-local while reading and mapped to the file's on error.
"""

from typing import IO, TYPE_CHECKING, Any, Iterator, List, Optional, Tuple

import orjson

from torchx_datapipes.io.bigints import loads_exact, may_hold_big_int
from torchx_datapipes.io.inputs.base import BOM, Batches, InputFormat, open_unit_stream
from torchx_datapipes.io.streams import CorruptError, TruncatedError

if TYPE_CHECKING:
    from torchx_datapipes.io.formats import UnitReader

_CHUNK = 1 << 22


class NotAnObject(ValueError):
    """A JSON Lines record that is not an object."""


class _Blank(ValueError):
    """A blank line in a text file (skipped and counted, not a record)."""


def json_type(value: Any) -> str:
    names = {list: "list", type(None): "null", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


def decode_text(raw: bytes) -> str:
    if not raw or raw.isspace():
        raise _Blank()
    return raw.rstrip(b"\r").decode("utf-8")


def show(raw: bytes, limit: int = 2000) -> str:
    text = raw.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


class _LineFormat(InputFormat):
    splittable = True
    jsonl = True

    def read(self, reader: "UnitReader") -> Batches:
        return _lines(reader, self.jsonl)

    def absolute(self, reader: "UnitReader", line: int) -> int:
        if reader.unit.start == 0:
            return line
        if reader._line_offset is None:
            reader._line_offset = _count_newlines(reader, reader._first_line_pos)
        return reader._line_offset + line


class JsonLinesFormat(_LineFormat):
    name = "jsonl"
    extensions = (".jsonl", ".ndjson")


class TextFormat(_LineFormat):
    name = "text"
    extensions = (".txt", ".text")
    jsonl = False


def _raw_chunks(r: "UnitReader", fh: IO[bytes], raw: Any) -> Iterator[Tuple[int, List[bytes], bool]]:
    """Yield ``(number of the first line, lines, may hold big ints)`` for lines starting in the unit."""
    start, end = r.unit.start, r.unit.end
    if start > 0:
        fh.seek(start - 1)
        fh.readline()  # the line that began before our range belongs to the previous unit
        r._first_line_pos = fh.tell()
    pos = r._first_line_pos
    lineno = 1
    tail = b""
    while True:
        want = _CHUNK if end < 0 else min(_CHUNK, end - pos)
        try:
            chunk = fh.read(want) if want > 0 else b""
        except (TruncatedError, CorruptError) as e:
            r.cut(e, lineno - 1, raw.consumed)
            return  # the cut-off tail is part of what was lost
        if not chunk:
            if end >= 0 and tail:
                tail += fh.readline()  # finish the line that straddles our end
            break
        if pos == 0 and chunk.startswith(BOM):
            chunk = chunk[len(BOM) :]
        pos += len(chunk)
        r.bytes_done = pos - start
        buf = tail + chunk
        parts = buf.split(b"\n")
        tail = parts.pop()
        yield lineno, parts, may_hold_big_int(buf)
        lineno += len(parts)
    if tail:
        yield lineno, [tail.rstrip(b"\n")], may_hold_big_int(tail)
    r.bytes_done = r.unit.nbytes


def _count_newlines(r: "UnitReader", upto: int) -> int:
    with open_unit_stream(r.unit.path, r.unit.size) as (fh, _):
        n, left = 0, upto
        while left > 0:
            buf = fh.read(min(_CHUNK, left))
            if not buf:
                break
            n += buf.count(b"\n")
            left -= len(buf)
        return n


def _lines(r: "UnitReader", jsonl: bool) -> Batches:
    # Hot loop. Line numbers of a batch are a ``range`` until a blank or bad line breaks the
    # run; only then is an explicit list built.
    size = r.batch_size
    loads = orjson.loads if jsonl else decode_text
    objects_only = jsonl and r.objects_only
    recs: List[Any] = []
    lines: Optional[List[int]] = None
    base = 0
    with open_unit_stream(r.unit.path, r.unit.size, buffered=False) as (fh, raw_fh):
        for first, chunk, big in _raw_chunks(r, fh, raw_fh):
            big = big and jsonl
            for lineno, raw in enumerate(chunk, first):
                try:
                    rec = loads(raw)
                    if big and may_hold_big_int(raw):
                        rec = loads_exact(raw)
                    if objects_only and rec.__class__ is not dict:
                        raise NotAnObject(f"expected a JSON object per line, got {json_type(rec)}")
                except (orjson.JSONDecodeError, UnicodeDecodeError, _Blank, NotAnObject) as e:
                    if not raw or raw.isspace():
                        r.blank += 1
                    else:
                        err = str(e) if isinstance(e, NotAnObject) else f"{type(e).__name__}: {e}"
                        r.add_bad(lineno, err, show(raw))
                    if recs and lines is None:
                        lines = list(range(base, base + len(recs)))
                    continue
                if lines is not None:
                    lines.append(lineno)
                elif not recs:
                    base = lineno
                recs.append(rec)
                if len(recs) >= size:
                    yield recs, (lines if lines is not None else range(base, base + len(recs)))
                    recs, lines = [], None
        r.bytes_read = raw_fh.consumed
    if recs:
        yield recs, (lines if lines is not None else range(base, base + len(recs)))
