"""Arrow tables as records for ``OutputDataset`` (Parquet outputs; needs pyarrow).

Columns are converted by formats/parquet/codec.py, the conversion the next job's ``--input`` uses too,
then zipped into record dicts.
"""

from typing import Any, Dict, List

import pyarrow as pa

from torchx_datapipes.formats.parquet.codec import column_values
from torchx_datapipes.formats.records import Columns


def table_columns(table: pa.Table) -> Columns:
    cols = tuple(column_values(table.column(i), table.schema.field(i)) for i in range(table.num_columns))
    return Columns(tuple(table.column_names), cols, table.num_rows)


def table_records(table: pa.Table) -> List[Dict[str, Any]]:
    return list(table_columns(table).records())
