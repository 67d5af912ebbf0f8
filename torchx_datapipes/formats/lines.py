"""Line formats: JSON Lines (a JSON object per line) and text (a ``str`` per line).

JSON Lines values are read as our writers write them (formats/jsonl/codec.py): integers beyond 64 bits
exact, and the tagged objects of typed values (``{"__tdp__": "tensor", ...}``: tensors, Decimal,
dates, times) as those values, so a job's JSON Lines output is the next job's input unchanged.

Uncompressed files are cut into line-aligned byte ranges; a line belongs to the unit its
first byte is in. Line numbers are unit-local while reading and mapped to the file's on error.
"""

from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, FrozenSet, Iterator, List, Optional, Tuple, Union

import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.base import BOM, Batches, InputFormat, open_unit_stream, too_large
from torchx_datapipes.formats.jsonl import dupkeys
from torchx_datapipes.formats.jsonl.bigints import TooDeep, big_int_lines, loads_exact
from torchx_datapipes.formats.jsonl.codec import TAG_BYTES, BadTag, decode_tags
from torchx_datapipes.io.streams import CorruptError, TruncatedError

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState

_CHUNK = 1 << 22
_HEAD = 2000  # bytes of a line over the record bound kept for its error


class NotAnObject(DatapipesError, ValueError):
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

    def read(self, reader: "ReadState") -> Batches:
        return _lines(reader, self.jsonl)

    def absolute(self, reader: "ReadState", line: int) -> int:
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


@dataclass
class _Long:
    """A line over the record bound, skipped by streaming: its number, size and first bytes."""

    line: int
    size: int
    head: bytes


Chunk = Union[Tuple[int, List[bytes], FrozenSet[int]], _Long]  # (first line, lines, big_int_lines)


def _skip_line(fh: IO[bytes]) -> None:
    """Read past the rest of the current line in bounded pieces (a line may be gigabytes long)."""
    while True:
        piece = fh.readline(_CHUNK)
        if not piece or piece.endswith(b"\n"):
            return


def _split_long(first: int, parts: List[bytes], big: FrozenSet[int], limit: int) -> Iterator[Chunk]:
    """``parts`` as chunks, the lines over ``limit`` bytes among them as :class:`_Long`."""
    longs = [i for i, p in enumerate(parts) if len(p) > limit]
    done = 0
    for i in longs:
        if i > done:
            yield first + done, parts[done:i], big
        yield _Long(first + i, len(parts[i]), parts[i][:_HEAD])
        done = i + 1
    if done < len(parts):
        yield first + done, parts[done:], big


def _raw_chunks(r: "ReadState", fh: IO[bytes], raw: Any) -> Iterator[Chunk]:
    """Yield ``(first line number, lines, those that may hold big ints)`` for lines starting in the unit.

    A line over the record bound (``r.max_record``) is yielded as a :class:`_Long` instead, and
    the rest of it is skipped by streaming. The start of an unfinished line is kept as a list of
    chunks, joined once when its newline comes (never re-copied per chunk), so at most about
    twice the bound plus a read chunk is held, whatever the line's length.
    """
    start, end, limit = r.unit.start, r.unit.end, r.max_record
    if start > 0:
        fh.seek(start - 1)
        _skip_line(fh)  # the line that began before our range belongs to the previous unit
        r._first_line_pos = fh.tell()
    pos = r._first_line_pos
    lineno = 1
    pending: List[bytes] = []  # the unfinished line so far (no newline in it)
    held = 0  # its bytes
    long: Optional[_Long] = None  # the line over the bound being skipped
    finishing = False  # past our end: reading the rest of the line that straddles it
    while True:
        want = _CHUNK if end < 0 or finishing else min(_CHUNK, end - pos)
        try:
            chunk = (fh.readline(_CHUNK) if finishing else fh.read(want)) if want > 0 else b""
        except (TruncatedError, CorruptError) as e:
            r.cut(e, lineno - 1, raw.consumed)
            return  # the cut-off tail is part of what was lost
        if not chunk:
            if end >= 0 and not finishing and (pending or long is not None):
                finishing = True  # finish the line that straddles our end
                continue
            break
        if pos == 0 and chunk.startswith(BOM):
            chunk = chunk[len(BOM) :]
        if not finishing:
            pos += len(chunk)
            r.bytes_done = pos - start
        if long is not None:
            nl = chunk.find(b"\n")
            if nl < 0:
                long.size += len(chunk)
                continue
            long.size += nl
            yield long
            lineno, long, chunk = lineno + 1, None, chunk[nl + 1 :]
            if finishing:
                break
        if chunk.find(b"\n") < 0:  # the line goes on: hold the chunk, unless the line is over the bound
            if chunk:
                pending.append(chunk)
                held += len(chunk)
            if held > limit:
                long = _Long(lineno, held, b"".join(pending[:2])[:_HEAD])
                pending, held = [], 0
            continue
        pending.append(chunk)
        buf = pending[0] if len(pending) == 1 else b"".join(pending)
        pending, held = [], 0
        big = big_int_lines(buf, lineno)
        parts = buf.split(b"\n")
        tail = parts.pop()
        if len(buf) > limit:
            del buf
            yield from _split_long(lineno, parts, big, limit)
        else:
            del buf
            yield lineno, parts, big
        lineno += len(parts)
        if len(tail) > limit:
            long = _Long(lineno, len(tail), tail[:_HEAD])
        elif tail:
            pending, held = [tail], len(tail)
        if finishing and not pending and long is None:
            break
    if long is not None:
        yield long
    elif pending:
        tail = b"".join(pending)
        yield lineno, [tail.rstrip(b"\n")], big_int_lines(tail, lineno)
    r.bytes_done = r.unit.nbytes


def _count_newlines(r: "ReadState", upto: int) -> int:
    with open_unit_stream(r.unit.path, r.unit.size) as (fh, _):
        n, left = 0, upto
        while left > 0:
            buf = fh.read(min(_CHUNK, left))
            if not buf:
                break
            n += buf.count(b"\n")
            left -= len(buf)
        return n


_KEY_END = b'":'  # ends every key of compact JSON (dupkeys.may_repeat)


def _skip(_raw: bytes) -> None:
    pass


def _checked(
    r: "ReadState", recs: List[Any], lines: Optional[List[int]], base: int, raws: List[bytes]
) -> Tuple[List[Any], Optional[List[int]]]:
    """A batch of JSON Lines records as parsed, checked: the keys an object repeats renamed
    (``dupkeys``), then tagged objects (formats/jsonl/codec.py: tensors, Decimal, dates) decoded, in
    the batches whose bytes hold the tag (one search of the batch; a plain file pays nothing else)."""
    joined = b"".join(raws)
    recs = _rename_repeated(r, recs, lines, base, raws, joined)
    if TAG_BYTES in joined:
        recs, lines = _decode_tagged(r, recs, lines, base, raws)
    return recs, lines


def _rename_repeated(
    r: "ReadState", recs: List[Any], lines: Optional[List[int]], base: int, raws: List[bytes], joined: bytes
) -> List[Any]:
    """``recs`` with the keys an object repeats renamed (``x``, ``x.1``; ``dupkeys``), each warned.

    Once per batch: the key colons (``":``) of its lines against the keys orjson returned, then
    against orjson's encoding of what it parsed (nested objects); equal means no repeated key."""
    raw_keys = joined.count(_KEY_END)
    try:
        if raw_keys <= sum(map(len, recs)) or raw_keys <= orjson.dumps(recs).count(_KEY_END):
            return recs
    except TypeError:  # an int beyond 64 bits, or a record that is a number: look line by line
        pass
    at = lines if lines is not None else range(base, base + len(recs))
    out = list(recs)
    for i, (rec, lineno, raw) in enumerate(zip(recs, at, raws, strict=True)):
        if dupkeys.may_repeat(raw, rec):
            new, found = dupkeys.renamed(raw)
            if found:
                out[i] = new
                r.renamed(lineno, found)
    return out


def _decode_tagged(
    r: "ReadState", recs: List[Any], lines: Optional[List[int]], base: int, raws: List[bytes]
) -> Tuple[List[Any], Optional[List[int]]]:
    """The records of lines holding the tag bytes, their tagged objects decoded; one that does not
    decode is a bad record."""
    at = lines if lines is not None else range(base, base + len(recs))
    keep_recs: List[Any] = []
    keep_lines: List[int] = []
    for rec, lineno, raw in zip(recs, at, raws, strict=True):
        if TAG_BYTES in raw:
            try:
                rec = decode_tags(rec)
            except BadTag as e:
                r.add_bad(lineno, str(e), show(raw))
                continue
        keep_recs.append(rec)
        keep_lines.append(lineno)
    return (keep_recs, lines) if len(keep_recs) == len(recs) else (keep_recs, keep_lines)


def _lines(r: "ReadState", jsonl: bool) -> Batches:
    # Hot loop. Line numbers of a batch are a ``range`` until a blank or bad line breaks the
    # run; only then is an explicit list built.
    size = r.batch_size
    loads = orjson.loads if jsonl else decode_text
    objects_only = jsonl and r.objects_only
    recs: List[Any] = []
    lines: Optional[List[int]] = None
    raws: List[bytes] = []  # the lines of ``recs`` (JSON Lines: checked for repeated keys per batch)
    keep = raws.append if jsonl else _skip
    base = 0
    with open_unit_stream(r.unit.path, r.unit.size, buffered=False) as (fh, raw_fh):
        for item in _raw_chunks(r, fh, raw_fh):
            if item.__class__ is _Long:
                assert isinstance(item, _Long)
                r.add_bad(item.line, too_large("the line", item.size, r.max_record), show(item.head) + " ...")
                if recs and lines is None:
                    lines = list(range(base, base + len(recs)))
                continue
            first, chunk, big = item  # type: ignore[misc]
            big = big if jsonl else frozenset()
            for lineno, raw in enumerate(chunk, first):
                try:
                    rec = loads(raw)
                    if big and lineno in big:
                        rec = loads_exact(raw)
                    if objects_only and rec.__class__ is not dict:
                        raise NotAnObject(f"expected a JSON object per line, got {json_type(rec)}")
                except (orjson.JSONDecodeError, UnicodeDecodeError, _Blank, NotAnObject, TooDeep) as e:
                    if not raw or raw.isspace():
                        r.blank += 1
                    else:
                        err = str(e) if isinstance(e, (NotAnObject, TooDeep)) else f"{type(e).__name__}: {e}"
                        r.add_bad(lineno, err, show(raw))
                    if recs and lines is None:
                        lines = list(range(base, base + len(recs)))
                    continue
                if lines is not None:
                    lines.append(lineno)
                elif not recs:
                    base = lineno
                recs.append(rec)
                keep(raw)
                if len(recs) >= size:
                    if jsonl:
                        recs, lines = _checked(r, recs, lines, base, raws)
                    if recs:
                        yield recs, (lines if lines is not None else range(base, base + len(recs)))
                    recs, lines, raws = [], None, []
                    keep = raws.append if jsonl else _skip
        r.bytes_read = raw_fh.consumed
    if recs and jsonl:
        recs, lines = _checked(r, recs, lines, base, raws)
    if recs:
        yield recs, (lines if lines is not None else range(base, base + len(recs)))
