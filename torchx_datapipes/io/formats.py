"""Record formats: detection and streaming readers that keep line numbers for errors."""

import contextlib
import csv
import enum
import posixpath
import sys
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence, Tuple

import fsspec
import orjson

from torchx_datapipes.errors import InputError
from torchx_datapipes.io.bigints import loads_exact, may_hold_big_int
from torchx_datapipes.io.fs import stat
from torchx_datapipes.io.streams import CorruptError, TruncatedError, open_capped

if TYPE_CHECKING:
    from torchx_datapipes.io.units import Unit

# JSON Lines records must be objects: a line holding a list, null, a number or a string is a
# bad record (stage parse). A reader built with objects_only=False yields any JSON value.
JSONL_OBJECTS_ONLY = True
_BOM = b"\xef\xbb\xbf"


def _raise_csv_field_limit() -> None:
    """The csv module refuses fields over 131,072 bytes; a long text field is data, not an error."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:  # a C long is 32 bits on some platforms
            limit //= 2


_raise_csv_field_limit()

_COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".bz2": "bz2", ".xz": "xz"}
_CHUNK = 1 << 22


class Format(str, enum.Enum):
    JSONL = "jsonl"
    CSV = "csv"
    TEXT = "text"
    PARQUET = "parquet"

    @classmethod
    def parse(cls, value: str) -> "Format":
        aliases = {"json": "jsonl", "ndjson": "jsonl", "txt": "text"}
        try:
            return cls(aliases.get(value.lower(), value.lower()))
        except ValueError:
            raise ValueError(
                f"unknown format {value!r}; use one of auto, {', '.join(f.value for f in cls)}"
            ) from None


_BY_EXT = {
    ".jsonl": Format.JSONL,
    ".json": Format.JSONL,
    ".ndjson": Format.JSONL,
    ".csv": Format.CSV,
    ".txt": Format.TEXT,
    ".text": Format.TEXT,
    ".parquet": Format.PARQUET,
    ".pq": Format.PARQUET,
}


def compression_of(path: str) -> Optional[str]:
    return _COMPRESSIONS.get(posixpath.splitext(path)[1].lower())


def detect_format(path: str) -> Format:
    """The format implied by the extension (after any compression suffix); JSON Lines by default."""
    stem = path[: -len(posixpath.splitext(path)[1])] if compression_of(path) else path
    return _BY_EXT.get(posixpath.splitext(stem)[1].lower(), Format.JSONL)


def extra_hint(extra: str, module: str) -> ImportError:
    return ImportError(f"{module} is not installed: pip install 'torchx-datapipes[{extra}]'")


@contextlib.contextmanager
def open_parquet(path: str) -> Iterator[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise extra_hint("parquet", "pyarrow") from e
    import pyarrow as pa

    with fsspec.open(path, "rb") as fh:
        try:
            pf = pq.ParquetFile(fh)
        except (pa.ArrowInvalid, OSError) as e:
            raise InputError(
                f"{path}: not a valid Parquet file ({e}); the file is truncated or is not Parquet."
                " Re-fetch or rewrite it, or pass --format to read it as another format"
            ) from e
        yield pf


@contextlib.contextmanager
def _open_capped(path: str, cap: int, buffered: bool = True) -> Iterator[Tuple[Any, Any]]:
    """The file's bytes up to ``cap`` (the planned size), decompressed: ``(stream, raw)``."""
    comp = compression_of(path)
    if comp == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError as e:
            raise extra_hint("zstd", "zstandard") from e
    with fsspec.open(path, "rb") as fh:
        stream, raw = open_capped(fh, cap, comp, buffered, path)
        yield stream, raw


class NotAnObject(ValueError):
    """A JSON Lines record that is not an object."""


@dataclass
class BadRecord:
    """An input record that could not be parsed (or later, transformed)."""

    line: int  # 1-based line (row for parquet) in the file
    error: str
    raw: str
    stage: str = "parse"


class UnitReader:
    """Streams one unit's records in batches of ``(records, lines)``.

    ``lines`` are 1-based and local to the unit; :meth:`absolute` maps them to the file.
    Unparseable records are appended to ``bad`` (the caller decides whether to raise or
    skip); blank lines are counted.
    """

    def __init__(self, unit: "Unit", batch_size: int = 1024, objects_only: bool = JSONL_OBJECTS_ONLY) -> None:
        self.unit = unit
        self.batch_size = max(1, batch_size)
        self.objects_only = objects_only
        self.bad: List[BadRecord] = []
        self.blank = 0
        self.records = 0
        self.bytes_done = 0
        self.bytes_read = 0  # raw (compressed, if so) bytes read from the file, boundary lines included
        self.bad_units = 0  # 1 when the unit's compressed stream was cut or corrupt
        self.lost_bytes = 0  # the raw bytes that could not be read (the unit's nbytes when unknown)
        self.unit_errors: List[BadRecord] = []  # stage "unit" (not records: not in ``bad``/records_in)
        self.on_batch: Optional[Callable[[int, int], None]] = None  # progress hook: (records, bytes)
        self._first_line_pos = 0
        self._line_offset: Optional[int] = None

    def absolute(self, line: int) -> int:
        """The file's line number for a unit-local one (counts the prefix lazily, on error only)."""
        if self.unit.start == 0 or self.unit.row_group >= 0:
            return line
        if self._line_offset is None:
            self._line_offset = self._count_newlines(self._first_line_pos)
        return self._line_offset + line

    def batches(self) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        """Batches of parsed records; ``self.records`` counts them as they go."""
        fmt = Format(self.unit.format)
        self._check_unchanged(fmt)
        if fmt is Format.PARQUET:
            gen = self._parquet()
        elif fmt is Format.CSV:
            gen = self._csv()
        else:
            gen = self._lines(fmt)
        for recs, lines in gen:
            self.records += len(recs)
            if self.on_batch is not None:
                self.on_batch(len(recs), self.bytes_done)
            yield recs, lines

    # -- what was planned ----------------------------------------------------------------------
    def _check_unchanged(self, fmt: Format) -> None:
        """Refuse a file that shrank or was replaced since planning (growth is fine: we stop at the plan)."""
        u = self.unit
        try:
            size, mtime = stat(u.path)
        except FileNotFoundError as e:
            raise InputError(
                f"{u.path} changed during the run (deleted): planned {u.size} bytes, now missing;"
                " restore it, or rerun to plan again without it"
            ) from e
        known = u.mtime >= 0 and mtime >= 0
        moved = known and mtime != u.mtime
        if (
            size < u.size
            or (moved and (size == u.size or fmt is Format.PARQUET))
            or (fmt is Format.PARQUET and size != u.size)
        ):
            what = "shrank" if size < u.size else "was replaced" if size == u.size else "was rewritten"
            times = f", modified at {u.mtime:.6f} then, {mtime:.6f} now" if moved else ""
            raise InputError(
                f"{u.path} changed during the run ({what}): planned {u.size} bytes, now {size}{times};"
                " rerun to plan again (and do not write into the inputs of a running job)"
            )

    def _cut(self, e: Exception, lines_read: int, consumed: int) -> None:
        """The compressed stream ended early or broke: one bad unit, and what it cost."""
        self.bad_units = 1
        unread = self.unit.size - consumed
        self.lost_bytes = unread if unread > 0 else self.unit.nbytes
        what = "ends early (truncated?)" if isinstance(e, TruncatedError) else "is corrupt"
        msg = f"compressed stream {what} after {lines_read} lines ({e})"
        self.unit_errors.append(BadRecord(lines_read, msg, "", "unit"))

    # -- line-oriented formats -------------------------------------------------------------
    def _raw_chunks(self, fh: IO[bytes], raw: Any) -> Iterator[Tuple[int, List[bytes], bool]]:
        """Yield ``(number of the first line, lines, may hold big ints)`` for lines starting in the unit."""
        start, end = self.unit.start, self.unit.end
        if start > 0:
            fh.seek(start - 1)
            fh.readline()  # the line that began before our range belongs to the previous unit
            self._first_line_pos = fh.tell()
        pos = self._first_line_pos
        lineno = 1
        tail = b""
        while True:
            want = _CHUNK if end < 0 else min(_CHUNK, end - pos)
            try:
                chunk = fh.read(want) if want > 0 else b""
            except (TruncatedError, CorruptError) as e:
                self._cut(e, lineno - 1, raw.consumed)
                return  # the cut-off tail is part of what was lost
            if not chunk:
                if end >= 0 and tail:
                    tail += fh.readline()  # finish the line that straddles our end
                break
            if pos == 0 and chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
            pos += len(chunk)
            self.bytes_done = pos - start
            buf = tail + chunk
            parts = buf.split(b"\n")
            tail = parts.pop()
            yield lineno, parts, may_hold_big_int(buf)
            lineno += len(parts)
        if tail:
            yield lineno, [tail.rstrip(b"\n")], may_hold_big_int(tail)
        self.bytes_done = self.unit.nbytes

    def _count_newlines(self, upto: int) -> int:
        with _open_capped(self.unit.path, self.unit.size) as (fh, _):
            n, left = 0, upto
            while left > 0:
                buf = fh.read(min(_CHUNK, left))
                if not buf:
                    break
                n += buf.count(b"\n")
                left -= len(buf)
            return n

    def _lines(self, fmt: Format) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        # Hot loop. Line numbers of a batch are a ``range`` until a blank or bad line breaks the
        # run; only then is an explicit list built.
        jsonl, size = fmt is Format.JSONL, self.batch_size
        loads = orjson.loads if jsonl else _decode_text
        objects_only = jsonl and self.objects_only
        recs: List[Any] = []
        lines: Optional[List[int]] = None
        base = 0
        with _open_capped(self.unit.path, self.unit.size, buffered=False) as (fh, raw_fh):
            for first, chunk, big in self._raw_chunks(fh, raw_fh):
                big = big and jsonl
                for lineno, raw in enumerate(chunk, first):
                    try:
                        rec = loads(raw)
                        if big and may_hold_big_int(raw):
                            rec = loads_exact(raw)
                        if objects_only and rec.__class__ is not dict:
                            raise NotAnObject(f"expected a JSON object per line, got {_json_type(rec)}")
                    except (orjson.JSONDecodeError, UnicodeDecodeError, _Blank, NotAnObject) as e:
                        if not raw or raw.isspace():
                            self.blank += 1
                        else:
                            err = str(e) if isinstance(e, NotAnObject) else f"{type(e).__name__}: {e}"
                            self.bad.append(BadRecord(lineno, err, _show(raw)))
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
            self.bytes_read = raw_fh.consumed
        if recs:
            yield recs, (lines if lines is not None else range(base, base + len(recs)))

    # -- CSV --------------------------------------------------------------------------------
    def _csv(self) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        state = {"line": 0}

        def decoded(fh: IO[bytes], raw_fh: Any) -> Iterator[str]:
            try:
                for raw in fh:
                    state["line"] += 1
                    self.bytes_done += len(raw)
                    if state["line"] == 1 and raw.startswith(_BOM):
                        raw = raw[len(_BOM) :]  # a byte-order mark is not part of the first column's name
                    try:
                        yield raw.decode("utf-8")
                    except UnicodeDecodeError as e:
                        self.bad.append(BadRecord(state["line"], f"UnicodeDecodeError: {e}", _show(raw)))
            except (TruncatedError, CorruptError) as e:
                self._cut(e, state["line"], raw_fh.consumed)
            self.bytes_read = raw_fh.consumed

        recs: List[Any] = []
        lines: List[int] = []
        with _open_capped(self.unit.path, self.unit.size) as (fh, raw_fh):
            reader = csv.reader(decoded(fh, raw_fh))
            header = self._csv_row(reader, state)
            if header is None:
                return
            while True:
                row = self._csv_row(reader, state)
                if row is None:
                    break
                if row is _CSV_BAD:
                    continue
                if not row or (len(row) == 1 and not row[0].strip()):
                    self.blank += 1
                    continue
                if len(row) != len(header):
                    msg = f"expected {len(header)} fields ({','.join(header)}), got {len(row)}"
                    self.bad.append(BadRecord(state["line"], msg, _show(",".join(row).encode())))
                    continue
                recs.append(dict(zip(header, row)))
                lines.append(state["line"])
                if len(recs) >= self.batch_size:
                    yield recs, lines
                    recs, lines = [], []
        if recs:
            yield recs, lines

    def _csv_row(self, reader: Any, state: dict) -> Optional[List[str]]:
        """The next row; a row the csv module refuses is a bad record (``_CSV_BAD``), not the job's end."""
        try:
            return next(reader, None)  # type: ignore[no-any-return]
        except csv.Error as e:
            self.bad.append(BadRecord(state["line"], f"csv.Error: {e}", ""))
            return _CSV_BAD

    # -- Parquet ------------------------------------------------------------------------------
    def _parquet(self) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        rg = self.unit.row_group
        with open_parquet(self.unit.path) as pf:
            row = sum(pf.metadata.row_group(i).num_rows for i in range(rg))
            for batch in pf.iter_batches(row_groups=[rg], batch_size=self.batch_size):
                recs = batch.to_pylist()
                yield recs, list(range(row + 1, row + 1 + len(recs)))
                row += len(recs)
        self.bytes_done = self.bytes_read = self.unit.nbytes


_CSV_BAD: List[str] = ["<bad row>"]


def _json_type(value: Any) -> str:
    names = {list: "list", type(None): "null", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


class _Blank(ValueError):
    """A blank line in a text file (skipped and counted, not a record)."""


def _decode_text(raw: bytes) -> str:
    if not raw or raw.isspace():
        raise _Blank()
    return raw.rstrip(b"\r").decode("utf-8")


def _show(raw: bytes, limit: int = 2000) -> str:
    text = raw.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
