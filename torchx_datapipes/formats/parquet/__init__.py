"""Parquet, in every direction (pyarrow).

- input (``--format parquet``): ``input.py``;
- output: ``writer.py`` (tables built by ``arrow.py``; one schema per job: ``unify.py``, the
  writer's ``finalize_job`` hook); reading parts back: ``reader.py`` and ``records.py``;
- one codec for both readers (tensors, 0-d included): ``codec.py`` and ``types.py``.
"""

from torchx_datapipes.formats.format import Format

FORMAT = Format(
    "parquet",
    input="torchx_datapipes.formats.parquet.input:ParquetFormat",
    writer="torchx_datapipes.formats.parquet.writer:ParquetPart",
    part_ext="parquet",
    reader="torchx_datapipes.formats.parquet.reader:ParquetFormat",
    extra="parquet",
    doc="columnar; tensors as fixed_shape_tensor or variable-shape lists",
)
