"""Parquet output: a part's batches are converted to Arrow, unified to one schema and written at commit.

A batch that does not convert is retried record by record; a record that does not convert, or
whose types cannot be widened to those of the records before it, is a failure naming its field.
The part's schema is kept (``schema``, serialized) for the job-wide unification at commit
(formats/parquet/unify.py).
"""

from typing import Any, Callable, Dict, List, Optional

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.jsonl.bigints import find_big_int
from torchx_datapipes.formats.writer import BasePart, Failures

ROW_GROUP_ROWS = 1 << 17
FLUSH_BYTES = 64 << 20  # Arrow bytes buffered before a row group is written
_PARQUET_HINT = "pyarrow is not installed: pip install 'torchx-datapipes[parquet]'"


def _pa() -> Any:
    try:
        import pyarrow as pa
    except ImportError as e:
        raise ImportError(_PARQUET_HINT) from e
    return pa


def convert_errors() -> tuple:  # the library errors a record can cause
    pa = _pa()
    return (pa.ArrowException, TypeError, ValueError, OverflowError)


def _why(rec: Any, e: BaseException) -> str:
    field = find_big_int(rec)
    if field:
        return (
            f"field {field}: integer beyond 64 bits; Parquet stores at most 64-bit integers."
            " Write --output_format jsonl (exact) or convert the field to str in your function"
        )
    if str(e).startswith("field "):
        return str(e)
    return f"output record cannot be written as Parquet: {type(e).__name__}: {e}"


def _empty_struct(t: Any, path: str) -> Optional[str]:
    """The path of an empty struct (from ``{}``) in type ``t``: Parquet cannot store one."""
    pa = _pa()
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return path
        for f in t:
            found = _empty_struct(f.type, f"{path}.{f.name}")
            if found:
                return found
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _empty_struct(t.value_type, f"{path}[]")
    return None


def check_writable(schema: Any) -> None:
    """Refuse (TypeError naming the field) what a Parquet file cannot hold though Arrow can."""
    for f in schema:
        found = _empty_struct(f.type, f.name)
        if found:
            raise TypeError(
                f"field {found}: an empty dict cannot be written as Parquet (a struct needs a field);"
                " return None or a dict with fields, or write --output_format jsonl or webdataset"
            )


class ParquetPart(BasePart):
    """Batches are buffered as Arrow and written in row groups of about ``FLUSH_BYTES``.

    Once a row group is written the part's schema is fixed; a later batch that widens it (rare:
    a field's type drifts after the first ``FLUSH_BYTES`` of output) makes the part rewrite what
    it wrote, with the wider schema, at commit. Where the row groups fall depends on the records
    alone, so the part's bytes do too.
    """

    ext = "parquet"

    def __init__(self, url: str, key_prefix: Optional[str] = None) -> None:
        _pa()
        super().__init__(url, key_prefix)
        self.tables: List[Any] = []
        self._buffered = 0  # bytes of self.tables
        self._schema: Any = None  # the unified schema of everything written or buffered
        self._pqw: Any = None  # the ParquetWriter, once a row group is written
        self._written: Any = None  # its schema

    @classmethod
    def finalize_job(
        cls, output: str, metas: List[Dict[str, Any]], meta_name: Callable[[Dict[str, Any]], str]
    ) -> Dict[str, Any]:
        """One schema for every part of the job (formats/parquet/unify.py)."""
        from torchx_datapipes.formats.parquet.unify import unify_parts

        return unify_parts(output, metas, meta_name, ROW_GROUP_ROWS)

    def _write(self, recs: List[Any]) -> Failures:
        bad = self._convert(recs)
        if self._buffered >= FLUSH_BYTES and (self._written is None or self._written.equals(self._schema)):
            self._flush()
        return bad

    def _add(self, table: Any, schema: Any) -> None:
        self.tables.append(table)
        self._buffered += table.nbytes
        self._schema = schema

    def _convert(self, recs: List[Any]) -> Failures:
        from torchx_datapipes.formats.parquet.arrow import to_table, unify

        errors = convert_errors()
        try:
            table = to_table(recs)
            check_writable(table.schema)
            self._add(table, table.schema if self._schema is None else unify([self._schema, table.schema]))
            return []
        except errors:
            pass
        bad: Failures = []
        for i, r in enumerate(recs):  # find the bad records one by one
            try:
                table = to_table([r])
                check_writable(table.schema)
            except errors as e:
                bad.append((i, _why(r, e)))
                continue
            try:
                schema = table.schema if self._schema is None else unify([self._schema, table.schema])
            except TypeError as e:
                bad.append((i, f"output record does not fit the part's schema: {e}"))
                continue
            self._add(table, schema)
        return bad

    def _flush(self) -> None:  # raises TypeError (by field) if a buffered table does not cast
        """Write the buffered tables as row groups with the current schema."""
        pa = _pa()
        import pyarrow.parquet as pq

        from torchx_datapipes.formats.parquet.arrow import conform

        if self._pqw is None:
            self._written = self._schema if self._schema is not None else pa.schema([])
            self._pqw = pq.ParquetWriter(self.fh, self._written)
        if self.tables:  # one table (zero-copy chunks): single-record fallbacks make no tiny row groups
            table = pa.concat_tables([conform(t, self._written) for t in self.tables])
            self._pqw.write_table(table, ROW_GROUP_ROWS)
        self.tables, self._buffered = [], 0

    def _finish(self) -> None:
        try:
            self._finish_part()
        except TypeError as e:
            raise DatapipesError(
                f"{self.url}: cannot write the part with the schema of its records: {e}. Make your"
                " function return one type per field"
            ) from e

    def _finish_part(self) -> None:
        if self._written is not None and not self._written.equals(self._schema):
            self._restart()  # the schema widened after a row group was written
        self._flush()
        self._pqw.close()
        self._pqw = None
        self.schema = self._written.serialize().to_pybytes()

    def _restart(self) -> None:
        """Read back what was written, start a new temporary file, and buffer it all again."""
        import pyarrow.parquet as pq

        self._pqw.close()
        self._pqw = None
        self.fh.close()
        with self.fs.open(self.tmp, "rb") as fh:
            written = pq.read_table(fh)
        old = self.tmp
        self.open_tmp()
        try:
            self.fs.rm(old)
        except OSError:
            pass  # the engine drops a leftover .tmp- file at commit
        self.tables = [written, *self.tables]
        self._written = None

    def abort(self) -> None:
        if self._pqw is not None:
            try:
                self._pqw.close()
            except (OSError, ValueError, _pa().ArrowException):
                pass  # the part is being thrown away
            self._pqw = None
        super().abort()
