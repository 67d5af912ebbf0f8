"""CSV column types: inferred over whole files, unified across files, applied per batch.

Types are one of ``int``, ``float``, ``bool``, ``date``, ``timestamp`` (no zone),
``timestamp_utc`` (every value with a zone: ``2017-01-01T06:00:42Z``, ``...+01:00``; read as UTC, as
pyarrow's own inference does), ``string`` (and ``null`` while a column has held no value). A
column's type is the narrowest that fits every non-null cell of the file: ``int`` joined with
``float`` is ``float``, ``date`` with ``timestamp`` is ``timestamp``, anything else that differs
is ``string`` (naive and zoned timestamps in one column are ``string``: neither reading is
right). Casting at read time uses the planned type, so every unit and rank gives the same types;
a cell that does not fit is a bad record naming its column and value.
"""

from typing import Any, Dict, Iterable, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc

# pandas.read_csv's default null markers (and the empty cell)
DEFAULT_NA = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>",
    "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
)  # fmt: skip
KINDS = ("int", "float", "bool", "date", "timestamp", "timestamp_utc")  # tried in this order
ARROW: Dict[str, pa.DataType] = {
    "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "date": pa.date32(),
    "timestamp": pa.timestamp("us"), "timestamp_utc": pa.timestamp("us", tz="UTC"), "string": pa.string(),
}  # fmt: skip


def join(a: str, b: str) -> str:
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    pair = {a, b}
    if pair == {"int", "float"}:
        return "float"
    if pair == {"date", "timestamp"}:
        return "timestamp"
    return "string"


def _fits(values: pa.Array, kind: str) -> bool:
    if len(values) > 4096 and not _fits(values.slice(0, 1024), kind):
        return False  # a cheap refusal first: a failing cast of a long column costs as much as a good one
    if kind == "bool":
        ok = pc.is_in(pc.utf8_lower(values), pa.array(["true", "false"]))
        return bool(pc.all(pc.or_kleene(pc.is_null(values), ok) if values.null_count else ok).as_py())
    try:
        pc.cast(values, ARROW[kind])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True


def batch_kind(col: pa.Array, current: str) -> str:
    """The join of ``current`` and the narrowest kind fitting every non-null cell of ``col``."""
    if current == "string" or col.null_count == len(col):
        return current
    if current != "null" and (current != "float" or not _has_big_int(col)) and _fits(col, current):
        return current  # the usual case past the first block: one cast (or test) per column
    values = pc.drop_null(col)
    for kind in KINDS:
        if kind == "float" and _has_big_int(values):
            return "string"  # an integer beyond int64 would lose digits as a float: keep the text exact
        if join(current, kind) != "string" and _fits(values, kind):
            return join(current, kind)
    return "string"


def _has_big_int(values: pa.Array) -> bool:
    longest = pc.max(pc.utf8_length(values)).as_py()
    if longest is None or longest < 19:
        return False  # no cell is long enough: skip the regular expression
    return bool(pc.any(pc.match_substring_regex(values, r"^\s*[+-]?\d{19,}\s*$")).as_py())


class Inference:
    """Column kinds of one file, batch after batch (all columns read as strings)."""

    def __init__(self) -> None:
        self.kinds: Dict[str, str] = {}
        self.columns: List[str] = []

    def update(self, batch: pa.RecordBatch) -> None:
        if not self.columns:
            self.columns = list(batch.schema.names)
            self.kinds = {c: "null" for c in self.columns}
        for name, col in zip(batch.schema.names, batch.columns):
            self.kinds[name] = batch_kind(col, self.kinds[name])


def unify(per_file: Iterable[Dict[str, str]]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for kinds in per_file:
        for c, k in kinds.items():
            out[c] = join(out.get(c, "null"), k)
    return {c: ("string" if k == "null" else k) for c, k in out.items()}


def split_kind(kind: str) -> Tuple[str, str]:
    """``"date[%Y/%m/%d]"`` -> ``("date", "%Y/%m/%d")``; ``"int"`` -> ``("int", "")``."""
    base, _, fmt = kind.partition("[")
    return base, fmt[:-1] if fmt.endswith("]") else fmt


def _cast_format(col: pa.Array, base: str, fmt: str) -> Tuple[pa.Array, Optional[List[int]]]:
    """``col`` parsed with the strptime format ``fmt`` (``--schema 'd:date[%Y/%m/%d]'``)."""
    parsed = pc.strptime(col, format=fmt, unit="us", error_is_null=True)
    failed = pc.and_(pc.is_valid(col), pc.is_null(parsed))
    wrong = [i for i, v in enumerate(failed.to_pylist()) if v] if pc.any(failed).as_py() else None
    return (pc.cast(parsed, pa.date32()) if base == "date" else parsed), wrong


def cast_column(col: pa.Array, kind: str) -> Tuple[pa.Array, Optional[List[int]]]:
    """``col`` (strings) as ``kind``; the indexes of cells that do not fit, or None when all fit."""
    base, fmt = split_kind(kind)
    if fmt:
        return _cast_format(col, base, fmt)
    if kind == "string":
        return col, None
    if kind == "bool":
        low = pc.utf8_lower(col)
        ok = pc.or_kleene(pc.is_null(col), pc.is_in(low, pa.array(["true", "false"])))
        wrong = None if pc.all(ok).as_py() else [i for i, v in enumerate(ok.to_pylist()) if not v]
        return pc.equal(low, "true"), wrong
    try:
        return pc.cast(col, ARROW[kind]), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    bad: List[int] = []
    for i, v in enumerate(col.to_pylist()):
        if v is None:
            continue
        try:
            pc.cast(pa.array([v]), ARROW[kind])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            bad.append(i)
    bad_set = set(bad)
    mask = pa.array([i not in bad_set for i in range(len(col))]) if bad else None
    fixed = pc.if_else(mask, col, pa.scalar(None, pa.string())) if mask is not None else col
    return pc.cast(fixed, ARROW[kind]), bad


def renamed(batch: pa.RecordBatch, names: List[str]) -> pa.RecordBatch:
    """``batch`` with its columns named ``names`` (unique names for a header with duplicates)."""
    if list(batch.schema.names) == names:
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, names=names)


def format_error(name: str, kind: str, value: Any) -> str:
    """The error of a cell that does not match the column's ``--schema`` date/timestamp format."""
    base, fmt = split_kind(kind)
    return (
        f"column {name!r}: {describe_value(value)} is not a {base} in the format {fmt!r} (from --schema"
        f" '{name}:{kind}'); fix the value, or change the format, or read the column as text with"
        f" --schema '{name}:str'"
    )


def describe_value(v: Any) -> str:
    return repr(v) if len(repr(v)) < 200 else repr(v)[:200] + "..."


NotText = Dict[int, Tuple[str, bytes]]  # row -> (column, the cell's bytes) of cells that are not UTF-8


def to_text(batch: pa.RecordBatch) -> Tuple[pa.RecordBatch, NotText]:
    """``batch`` with every column as strings; a cell that is not UTF-8 becomes null and is reported.

    The parser reads cells as bytes, so that one cell in another encoding (a latin-1 ``é``) is one
    bad row, not a failure of the whole file; the cast to text checks UTF-8 (one pass, no copy).
    """
    cols: List[pa.Array] = []
    bad: NotText = {}
    for name, col in zip(batch.schema.names, batch.columns):
        if pa.types.is_string(col.type):
            cols.append(col)
            continue
        try:
            cols.append(col.cast(pa.string()))
            continue
        except pa.ArrowInvalid:
            if not pa.types.is_binary(col.type):
                raise
        wrong: List[bool] = []
        for i, v in enumerate(col.to_pylist()):
            ok = True
            if v is not None:
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    ok = False
                    bad.setdefault(i, (name, v))
            wrong.append(not ok)
        cols.append(pc.if_else(pa.array(wrong), pa.scalar(None, pa.binary()), col).cast(pa.string()))
    return pa.RecordBatch.from_arrays(cols, names=batch.schema.names), bad


def not_text_error(name: str, value: bytes) -> str:
    """The error of a cell that is not UTF-8: the column, the bytes, and the fix."""
    at = 0
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as e:
        at = e.start
    shown = describe_value(value[max(0, at - 20) : at + 20])
    return (
        f"column {name!r}: not UTF-8 text (byte 0x{value[at]:02x} at offset {at} of the cell, in {shown});"
        " the file is in another encoding (e.g. latin-1): convert it to UTF-8, e.g."
        " iconv -f latin1 -t utf-8 IN.csv > OUT.csv"
    )


def longest_row(batch: pa.RecordBatch) -> int:
    """The bytes of the longest row's cells (null cells count 0)."""
    if not batch.num_rows or not batch.num_columns:
        return 0
    total = None
    for col in batch.columns:
        n = pc.fill_null(pc.binary_length(col), 0)
        total = n if total is None else pc.add(total, n)
    return int(pc.max(total).as_py() or 0)
