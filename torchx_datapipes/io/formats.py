"""Record formats: detection and streaming readers that keep line numbers for errors."""

import contextlib
import csv
import enum
import posixpath
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence, Tuple

import fsspec
import orjson

if TYPE_CHECKING:
    from torchx_datapipes.io.units import Unit

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
    with fsspec.open(path, "rb") as fh:
        yield pq.ParquetFile(fh)


def _open_binary(path: str) -> Any:
    comp = compression_of(path)
    if comp == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError as e:
            raise extra_hint("zstd", "zstandard") from e
    return fsspec.open(path, "rb", compression=comp)


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

    def __init__(self, unit: "Unit", batch_size: int = 1024) -> None:
        self.unit = unit
        self.batch_size = max(1, batch_size)
        self.bad: List[BadRecord] = []
        self.blank = 0
        self.records = 0
        self.bytes_done = 0
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

    # -- line-oriented formats -------------------------------------------------------------
    def _raw_chunks(self, fh: IO[bytes]) -> Iterator[Tuple[int, List[bytes]]]:
        """Yield ``(number of the first line, lines)`` for lines whose first byte lies in the unit."""
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
            chunk = fh.read(want) if want > 0 else b""
            if not chunk:
                if end >= 0 and tail:
                    tail += fh.readline()  # finish the line that straddles our end
                break
            pos += len(chunk)
            self.bytes_done = pos - start
            parts = (tail + chunk).split(b"\n")
            tail = parts.pop()
            yield lineno, parts
            lineno += len(parts)
        if tail:
            yield lineno, [tail.rstrip(b"\n")]
        self.bytes_done = self.unit.nbytes

    def _count_newlines(self, upto: int) -> int:
        with _open_binary(self.unit.path) as fh:
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
        recs: List[Any] = []
        lines: Optional[List[int]] = None
        base = 0
        with _open_binary(self.unit.path) as fh:
            for first, chunk in self._raw_chunks(fh):
                for lineno, raw in enumerate(chunk, first):
                    try:
                        rec = loads(raw)
                    except (orjson.JSONDecodeError, UnicodeDecodeError, _Blank) as e:
                        if not raw or raw.isspace():
                            self.blank += 1
                        else:
                            self.bad.append(BadRecord(lineno, f"{type(e).__name__}: {e}", _show(raw)))
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
        if recs:
            yield recs, (lines if lines is not None else range(base, base + len(recs)))

    # -- CSV --------------------------------------------------------------------------------
    def _csv(self) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        state = {"line": 0}

        def decoded(fh: IO[bytes]) -> Iterator[str]:
            for raw in fh:
                state["line"] += 1
                self.bytes_done += len(raw)
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    self.bad.append(BadRecord(state["line"], f"UnicodeDecodeError: {e}", _show(raw)))

        recs: List[Any] = []
        lines: List[int] = []
        with _open_binary(self.unit.path) as fh:
            reader = csv.reader(decoded(fh))
            header = next(reader, None)
            if header is None:
                return
            for row in reader:
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

    # -- Parquet ------------------------------------------------------------------------------
    def _parquet(self) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        rg = self.unit.row_group
        with open_parquet(self.unit.path) as pf:
            row = sum(pf.metadata.row_group(i).num_rows for i in range(rg))
            for batch in pf.iter_batches(row_groups=[rg], batch_size=self.batch_size):
                recs = batch.to_pylist()
                yield recs, list(range(row + 1, row + 1 + len(recs)))
                row += len(recs)
        self.bytes_done = self.unit.nbytes


class _Blank(ValueError):
    """A blank line in a text file (skipped and counted, not a record)."""


def _decode_text(raw: bytes) -> str:
    if not raw or raw.isspace():
        raise _Blank()
    return raw.rstrip(b"\r").decode("utf-8")


def _show(raw: bytes, limit: int = 2000) -> str:
    text = raw.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
