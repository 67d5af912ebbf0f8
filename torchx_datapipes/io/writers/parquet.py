"""Parquet output: a part's batches are converted to Arrow, unified to one schema and written at commit.

A batch that does not convert is retried record by record; a record that does not convert, or
whose types cannot be widened to those of the records before it, is a failure naming its field.
The part's schema is kept (``schema``, serialized) for the job-wide unification at commit
(io/writers/commit.py).
"""

from typing import Any, List, Optional

from torchx_datapipes.io.bigints import find_big_int
from torchx_datapipes.io.writers.base import BasePart, Failures

ROW_GROUP_ROWS = 1 << 17
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
    return f"output record cannot be written as Parquet: {type(e).__name__}: {e}"


class ParquetPart(BasePart):
    ext = "parquet"

    def __init__(self, url: str, key_prefix: Optional[str] = None) -> None:
        _pa()
        super().__init__(url, key_prefix)
        self.tables: List[Any] = []
        self._schema: Any = None  # the running unified schema of what is buffered

    def _write(self, recs: List[Any]) -> Failures:
        from torchx_datapipes.io.writers.arrow import to_table, unify

        errors = convert_errors()
        try:
            table = to_table(recs)
            schema = table.schema if self._schema is None else unify([self._schema, table.schema])
            self.tables.append(table)
            self._schema = schema
            return []
        except errors:
            pass
        bad: Failures = []
        for i, r in enumerate(recs):  # find the bad records one by one
            try:
                table = to_table([r])
            except errors as e:
                bad.append((i, _why(r, e)))
                continue
            try:
                schema = table.schema if self._schema is None else unify([self._schema, table.schema])
            except TypeError as e:
                bad.append((i, f"output record does not fit the part's schema: {e}"))
                continue
            self.tables.append(table)
            self._schema = schema
        return bad

    def _finish(self) -> None:
        pa = _pa()
        import pyarrow.parquet as pq

        from torchx_datapipes.io.writers.arrow import conform

        schema = self._schema if self._schema is not None else pa.schema([])
        with pq.ParquetWriter(self.fh, schema) as w:
            if self.tables:  # one table (zero-copy chunks): single-record fallbacks make no tiny row groups
                w.write_table(pa.concat_tables([conform(t, schema) for t in self.tables]), ROW_GROUP_ROWS)
        self.tables = []
        self.schema = schema.serialize().to_pybytes()
