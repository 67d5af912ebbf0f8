"""Typed CSV and TSV, read with pyarrow's CSV parser.

Planning (rank 0) streams every CSV file, as strings, and infers each column's type over
the WHOLE file with bounded memory (``csv_infer``, ``csv_types``); types are unified across
files and stored in each unit (``Unit.read["schema"]``), so every unit and rank casts to the
same types. ``--schema`` overrides inference per column. Reading parses as strings, turns the null markers
(``--na_values``, pandas' defaults) into None and casts each column; a cell that does not fit
is a bad record with its file line, column and value. The location of a record is the file
line it starts on (a record with a quoted newline spans several lines), found by
``csv_lines.RecordLines`` from the same bytes the parser reads.
"""

import io
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats import columns as cols
from torchx_datapipes.formats.base import (
    ArrowBatches,
    Batches,
    InputFormat,
    PlannedFile,
    ReadOptions,
    extra_hint,
    open_unit_stream,
    stem_of,
    too_large,
)
from torchx_datapipes.formats.csv.lines import RecordLines, Tee
from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io.streams import CorruptError, TruncatedError

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState

try:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from torchx_datapipes.formats.csv import infer as csv_infer
    from torchx_datapipes.formats.csv import types as ct

    _MISSING = False
except ImportError:  # pragma: no cover - the format still owns .csv; planning says what to install
    _MISSING = True


def _need_pyarrow() -> None:
    if _MISSING:
        raise extra_hint("parquet", "pyarrow")


_BLOCK = 1 << 20  # pyarrow reads a few blocks ahead: 1 MiB blocks halve a rank's peak RSS vs 4 MiB, same CPU


def default_delimiter(path: str) -> str:
    return "\t" if stem_of(path).lower().endswith(".tsv") else ","


def raw_names(names: List[str], header: bool, renamed: Sequence[Sequence[Any]]) -> List[str]:
    """The column names the parser sees: the file's header (before renaming), or pyarrow's f0..fN-1."""
    if not header:
        return [f"f{i}" for i in range(len(names))]
    raw = list(names)
    for i, old, _ in renamed:
        raw[int(i)] = str(old)
    return raw


class _Parse:
    """One pass of pyarrow's parser over a file: string batches, record lines, invalid rows."""

    def __init__(
        self,
        stream: Any,
        delimiter: str,
        na_values: Sequence[str],
        columns: Optional[List[str]],
        block: int = 0,
        header: bool = True,
        raw: Optional[List[str]] = None,
    ) -> None:
        self.lines = RecordLines(delimiter)
        self.invalid: Deque[str] = deque()
        tee = io.BufferedReader(Tee(stream, self.lines), buffer_size=1 << 20)
        conv = pacsv.ConvertOptions(
            null_values=list(na_values),
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
            column_types={c: pa.binary() for c in (raw or columns or [])} or None,
        )
        self.reader: Any = None
        try:
            self.reader = pacsv.open_csv(
                tee,
                read_options=pacsv.ReadOptions(
                    use_threads=False, block_size=max(block, _BLOCK), autogenerate_column_names=not header
                ),
                parse_options=pacsv.ParseOptions(
                    delimiter=delimiter, newlines_in_values=True, invalid_row_handler=self._invalid
                ),
                convert_options=conv,
            )
        except pa.ArrowInvalid as e:
            if "Empty CSV file" not in str(e):
                raise
        found: List[str] = list(self.reader.schema.names) if self.reader is not None else []
        # the planned names (unique; 0..n-1 without a header), else the file's made unique
        self.columns = list(columns) if columns and len(columns) == len(found) else cols.dedup(found)
        if not self.columns:  # an empty file, or a BOM alone: no header, no records
            self.reader = None
        if self.reader is not None and header:
            while len(self.lines) and self.lines.peek()[2]:
                self.lines.pop()  # blank lines before the header
            if len(self.lines):
                self.lines.pop()  # the header

    def _invalid(self, row: Any) -> str:
        self.invalid.append(row.text)
        return "skip"

    def batches(self) -> Iterator[Tuple[Any, "ct.NotText"]]:
        """String batches, and the cells of each that are not UTF-8 (row -> column, bytes)."""
        if self.reader is None:
            return
        try:
            for batch in self.reader:
                yield ct.to_text(ct.renamed(batch, self.columns))
        finally:
            self.reader.close()  # now, not at exit: the parser's reading thread calls back into Python


class CsvFormat(InputFormat):
    name = "csv"
    extensions = (".csv", ".tsv")
    columnar = True

    def plan(self, files: Sequence[PlannedFile], target: int, opts: ReadOptions) -> List[Unit]:
        _need_pyarrow()
        na = list(ct.DEFAULT_NA if opts.na_values is None else opts.na_values)
        delims = [opts.delimiter or default_delimiter(f[0]) for f in files]
        kinds = csv_infer.infer_files(
            files, delims, na, max_record=opts.max_record, header=opts.header, schema=list(opts.schema)
        )
        found = [(f, d, *fk) for f, d, fk in zip(files, delims, kinds, strict=True)]
        unified = ct.unify(k for _, _, _, k, _, _, _ in found)
        known = set(unified)
        wrong = [c for c in opts.schema if c not in known]
        if wrong and found:
            raise InputError(
                f"--schema names column(s) {', '.join(map(repr, wrong))} that no CSV input has;"
                f" columns: {', '.join(sorted(known))}"
                + (
                    f"; without a header (--header false) the columns are named 0..n-1, or by --schema"
                    f" when it lists all {len(found[0][2])} columns in order"
                    if not opts.header
                    else ""
                )
            )
        unified.update(opts.schema)
        units = []
        for (path, size, mtime), delim, names, _, block, spans, renames in found:
            read: Dict[str, Any] = {
                "schema": [[c, unified[c]] for c in names],
                "na_values": na,
                "delimiter": delim,
            }
            if not opts.header:
                read["header"] = False
            if renames:  # a header with duplicate names: reported on stderr and in the manifest
                read["renamed"] = [list(r) for r in renames]
                cols.warn(path, renames)
            if block > _BLOCK:  # a record longer than the usual block (up to --max_record_mb)
                read["block"] = block
            if spans:  # records over --max_record_mb: left out when parsing, each a bad record
                read["over"] = [list(sp) for sp in spans]
            units.append(Unit(0, path, size, format=self.name, mtime=mtime, read=read))
        return units

    def read(self, reader: "ReadState") -> Batches:
        for table, lines in self.read_arrow(reader):
            recs = table.to_pylist()
            for i in range(0, len(recs), reader.batch_size):
                yield recs[i : i + reader.batch_size], lines[i : i + reader.batch_size]

    def read_arrow(self, reader: "ReadState") -> ArrowBatches:
        """Typed record batches (bad rows left out, reported to ``reader``) and their file lines."""
        _need_pyarrow()
        u = reader.unit
        info = u.read or {}
        schema: List[Tuple[str, str]] = [(c, t) for c, t in info.get("schema", [])]
        na = info.get("na_values", list(ct.DEFAULT_NA))
        delim = info.get("delimiter") or default_delimiter(u.path)
        block = int(info.get("block", 0))
        over = [tuple(sp) for sp in info.get("over", [])]
        for line, _, _, _, nbytes in over:  # left out of parsing (the parser needs a record per block)
            what = "the CSV record (a row, quoted fields included)"
            reader.add_bad(line, too_large(what, nbytes, reader.max_record), "")
        with open_unit_stream(u.path, u.size) as (fh, raw):
            try:
                yield from self._read(reader, csv_infer.without(fh, over), schema, na, delim, block, info)
            except (TruncatedError, CorruptError) as e:
                reader.cut(e, reader.records + len(reader.bad), raw.consumed)
            except pa.ArrowInvalid as e:
                raise InputError(csv_infer.parse_error(u.path, e)) from e
            reader.bytes_read = raw.consumed
        reader.blank = max(0, reader.blank - sum(sp[3] for sp in over))  # their newlines were not blank lines
        reader.bytes_done = u.nbytes

    def _read(
        self,
        reader: "ReadState",
        fh: Any,
        schema: List[Tuple[str, str]],
        na: List[str],
        delim: str,
        block: int = 0,
        info: Optional[Dict[str, Any]] = None,
    ) -> ArrowBatches:
        kinds = dict(schema)
        names = [c for c, _ in schema]
        header = (info or {}).get("header", True)
        raw = raw_names(names, header, (info or {}).get("renamed", []))
        parse = _Parse(fh, delim, na, names or None, block, header, raw)
        ncols = len(parse.columns)
        header = delim.join(parse.columns)
        for batch, not_text in parse.batches():
            lines = self._lines(reader, parse, batch.num_rows, ncols, header)
            yield self._typed(reader, batch, kinds, lines, delim, not_text)
        self._lines(reader, parse, -1, ncols, header)

    @staticmethod
    def _lines(reader: "ReadState", parse: _Parse, n: int, ncols: int, header: str) -> List[int]:
        """The first lines of the next ``n`` rows (all remaining records when ``n`` < 0)."""
        out, odd, blank = parse.lines.take(n, ncols)
        reader.blank += blank
        for line, fields, _ in odd:
            text = parse.invalid.popleft() if parse.invalid else ""
            reader.add_bad(line, f"expected {ncols} fields ({header}), got {fields}", text)
        if n >= 0 and len(out) < n:
            out += [0] * (
                n - len(out)
            )  # the scanner and the parser disagree (a quote inside an unquoted field)
        return out

    @staticmethod
    def _typed(
        reader: "ReadState",
        batch: Any,
        kinds: Dict[str, str],
        lines: List[int],
        delim: str,
        not_text: Optional["ct.NotText"] = None,
    ) -> Tuple[Any, List[int]]:
        cols: List[Any] = []
        bad: Dict[int, Tuple[str, str, Any]] = {}
        for i, (name, value) in (not_text or {}).items():
            bad[i] = (name, "", value)  # kind "": not UTF-8 (the cell is null in ``batch``)
        for name, col in zip(batch.schema.names, batch.columns):
            kind = kinds.get(name, "string")
            typed, wrong = ct.cast_column(col, kind)
            cols.append(typed)
            for i in wrong or ():
                bad.setdefault(i, (name, kind, col[i].as_py()))
        table = pa.RecordBatch.from_arrays(cols, names=batch.schema.names)
        if not bad:
            return table, lines
        for i, (name, kind, value) in sorted(bad.items()):
            cells = batch.slice(i, 1).to_pylist()[0]
            if not kind:
                cells[name] = value.decode("utf-8", errors="backslashreplace")
            row = delim.join("" if v is None else str(v) for v in cells.values())
            error = (
                ct.not_text_error(name, value)
                if not kind
                else ct.format_error(name, kind, value)
                if "[" in kind
                else f"column {name!r}: {ct.describe_value(value)} is not a {kind} (the column's type); fix"
                f" the value, or read the column as text with --schema '{name}:str'"
            )
            reader.add_bad(lines[i], error, row)
        keep = pa.array([i not in bad for i in range(batch.num_rows)])
        return table.filter(keep), [ln for i, ln in enumerate(lines) if i not in bad]
