"""CSV and TSV input (pyarrow's parser): ``input.py`` reads, ``infer.py`` types the columns,
``lines.py`` finds record boundaries (quoted newlines), ``types.py`` holds the column types."""

from torchx_datapipes.formats.format import Format

FORMAT = Format(
    "csv",
    input="torchx_datapipes.formats.csv.input:CsvFormat",
    aliases=("tsv",),
    options=("delimiter", "header", "na_values", "schema"),
    extra="parquet",
    doc="comma or tab separated, with a header row (or --header false)",
)
