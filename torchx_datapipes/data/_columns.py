"""Column selection checks shared by the iterable and map-style readers."""

from typing import Sequence

from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats.chunks import ReadOptions
from torchx_datapipes.formats.parquet.reader import ParquetFormat
from torchx_datapipes.io.part import Part


def check_columns_exist(fmt: str, parts: Sequence[Part], opts: ReadOptions) -> None:
    if opts.columns is None or fmt != "parquet" or not parts:
        return
    names = ParquetFormat().schema_names(parts[0], opts)
    missing = [c for c in opts.columns if c not in names]
    if missing:
        raise ReadError(f"columns {missing} are not in {parts[0].url}; its columns: {names}")
