"""Parquet: a unit is a row group; the location of a record is its row in the file (1-based)."""

import contextlib
from typing import TYPE_CHECKING, Any, Iterator, List, Sequence

import fsspec

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats import columns as cols
from torchx_datapipes.formats.base import (
    ArrowBatches,
    Batches,
    InputFormat,
    PlannedFile,
    ReadOptions,
    extra_hint,
)
from torchx_datapipes.formats.unit import Unit

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState


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


def _records(batch: Any) -> List[Any]:
    """Rows as dicts; our tensor layouts as torch tensors, as ``OutputDataset`` reads them."""
    import pyarrow as pa

    from torchx_datapipes.formats.parquet.codec import column_values, has_tensors

    if not has_tensors(batch.schema):
        return batch.to_pylist()
    cols = [column_values(pa.chunked_array([c], type=c.type), f) for c, f in zip(batch.columns, batch.schema)]
    return [dict(zip(batch.schema.names, row)) for row in zip(*cols)]


_COLUMNAR_ROWS = 1 << 16  # rows per record batch for columnar readers (the stats op)


class ParquetFormat(InputFormat):
    name = "parquet"
    extensions = (".parquet", ".pq")
    columnar = True
    strict_unchanged = True  # any change moves the footer

    def plan(self, files: Sequence[PlannedFile], target: int, opts: ReadOptions) -> List[Unit]:
        units: List[Unit] = []
        for path, size, mtime in files:
            with open_parquet(path) as pf:
                groups = int(pf.num_row_groups)
                raw = list(pf.schema_arrow.names)
            done = cols.renames(raw, cols.dedup(raw))
            read = {"renamed": [list(r) for r in done]} if done else None  # duplicate column names
            cols.warn(path, done)
            units.extend(
                Unit(0, path, size, row_group=rg, format=self.name, mtime=mtime, read=read)
                for rg in range(groups)
            )
        return units

    def read(self, reader: "ReadState") -> Batches:
        for batch, lines in self._batches(reader, reader.batch_size):
            yield _records(batch), list(lines)

    def read_arrow(self, reader: "ReadState") -> ArrowBatches:
        return self._batches(reader, max(reader.batch_size, _COLUMNAR_ROWS))

    @staticmethod
    def _batches(reader: "ReadState", rows: int) -> ArrowBatches:
        import pyarrow as pa

        rg = reader.unit.row_group
        renamed = bool((reader.unit.read or {}).get("renamed"))
        with open_parquet(reader.unit.path) as pf:
            first = sum(pf.metadata.row_group(i).num_rows for i in range(rg))
            row = first
            try:
                for batch in pf.iter_batches(row_groups=[rg], batch_size=rows):
                    if renamed:
                        batch = pa.RecordBatch.from_arrays(batch.columns, schema=_renamed(batch.schema))
                    yield batch, range(row + 1, row + 1 + batch.num_rows)
                    row += batch.num_rows
            except (OSError, pa.ArrowInvalid) as e:
                _damaged(reader, pf, rg, first, row, e)
        reader.bytes_done = reader.bytes_read = reader.unit.nbytes


def _renamed(schema: Any) -> Any:
    """``schema`` with duplicate names made unique like pandas (field types and metadata kept)."""
    import pyarrow as pa

    names = cols.dedup(schema.names)
    return pa.schema([f.with_name(n) for f, n in zip(schema, names)], metadata=schema.metadata)


def _damaged(reader: "ReadState", pf: Any, rg: int, first: int, row: int, e: Exception) -> None:
    """A row group that cannot be decoded (a corrupt page): a bad unit naming the row group and column."""
    meta = pf.metadata.row_group(rg)
    columns = _failing_columns(pf, rg)
    where = f"column {', '.join(map(repr, columns))} of " if columns else ""
    error = (
        f"{where}row group {rg} (rows {first + 1}..{first + meta.num_rows}) cannot be decoded:"
        f" {type(e).__name__}: {' '.join(str(e).split())} (the file is damaged: a corrupt or truncated page)"
    )
    fix = "re-fetch the file or write it again from its source (check it with pyarrow.parquet.read_table)"
    lost = sum(int(meta.column(i).total_compressed_size) for i in range(meta.num_columns))
    reader.damaged(row, error, lost, fix)


def _failing_columns(pf: Any, rg: int) -> List[str]:
    """The columns of row group ``rg`` that fail to decode alone (on error only: one read per column)."""
    import pyarrow as pa

    bad = []
    for name in pf.schema_arrow.names:
        try:
            pf.read_row_group(rg, columns=[name])
        except (OSError, pa.ArrowInvalid):
            bad.append(name)
    return bad
