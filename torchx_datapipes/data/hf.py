"""``hf_features``: the HF ``datasets.Features`` that let ``load_dataset("parquet")`` read an output.

HF ``datasets`` (5.x) has no equivalent of Arrow's canonical ``arrow.fixed_shape_tensor``
extension type, so ``load_dataset("parquet", data_files=...)`` refuses a Parquet output with a
tensor column ("does not have a datasets dtype equivalent") unless it is given the features.
This builds them from the parts' schema: a fixed-shape tensor column becomes its storage,
``List(Value(dtype), length=prod(shape))`` (row-major, flat: HF casts the extension array to
its storage; reshape with the shape, or read with :class:`OutputDataset`, which keeps it); every
other column is what HF infers itself.
"""

from typing import Any, Dict, Mapping, Optional

from torchx_datapipes.data._parts import load_parts
from torchx_datapipes.errors import ReadError
from torchx_datapipes.io.partfiles import open_part


def hf_features(
    url: str, split: Optional[str] = None, *, storage_options: Optional[Mapping[str, Any]] = None
) -> Any:
    """The ``datasets.Features`` of the Parquet output at ``url`` (one split of a split output).

    Example::

        files = [...]  # the output's part-*.parquet (or use the manifest's units/outputs)
        datasets.load_dataset("parquet", data_files=files, features=hf_features(OUT))
    """
    try:
        import datasets
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError(
            f"hf_features needs HF datasets and pyarrow: pip install datasets"
            f" 'torchx-datapipes[parquet]' ({e})"
        ) from e
    fmt, parts = load_parts(url, split, storage_options)
    if fmt != "parquet":
        raise ReadError(f"{url} is a {fmt} output: hf_features describes Parquet outputs only")
    if not parts:
        where = f" in split {split!r}" if split else ""
        raise ReadError(f"{url} has no records{where}: nothing to describe")
    with open_part(parts[0], storage_options, None) as f:
        schema = pq.read_schema(f)
    storage: Dict[str, Any] = {}
    for field in schema:
        t = field.type
        storage[field.name] = t.storage_type if isinstance(t, pa.FixedShapeTensorType) else t
    plain = pa.schema([pa.field(n, t) for n, t in storage.items()])
    return datasets.Features.from_arrow_schema(plain)
