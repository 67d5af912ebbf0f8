"""The readers compared, each built from one data set's copies (:class:`.data.Copies`).

Every reader is handed to the same ``DataLoader(ds, batch_size, num_workers)`` (default collate):

- ``pyarrow``: a fair hand-written reader (:class:`PlainParquet`) over OUR Parquet parts.
- ``litdata``: ``litdata.StreamingDataset(copy)`` (iterable; no shuffle, its default).
- ``hf-map``: HF ``Dataset.from_file(...)``, ``with_format("torch")``, map-style (the DataLoader
  asks for batches of indices in order; ``datasets`` serves them with ``__getitems__``).
- ``hf-iter``: the same, ``to_iterable_dataset(num_shards=parts)`` then ``with_format("torch")``.
- ``ours``: ``OutputDataset(OUT)`` (shuffle off); ``ours-shuffle``: ``shuffle=True, seed=0``;
  ``ours-map``: ``OutputDataset.map_style(OUT)`` (map-style, indices in order, like ``hf-map``),
  over the first ``map_limit`` indices only (``torch.utils.data.Subset``, which passes whole
  batches to ``__getitems__``): each batch reads the whole row groups that hold its rows (a
  Parquet row group is the smallest unit Parquet can decode), i.e. ~25k token or ~6k image
  records per 64-record batch, so a full pass would take many minutes.
- ``ours-wds``: ``OutputDataset`` over our ``--output_format webdataset`` copy (tensors as
  ``.npy`` tar members: no Parquet list decoding).
- ``ours-noverify``, ``ours-wds-noverify``: ``ours`` and ``ours-wds`` with the reader's checksum
  verification switched off (``torchx_datapipes.io.verify.VERIFY``, a benchmark-only switch):
  the baseline its cost is measured against (issue 23). Every other ``ours`` row verifies.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, Subset, get_worker_info

from .data import Copies

METHODS = (
    "pyarrow", "litdata", "hf-map", "hf-iter", "ours", "ours-shuffle", "ours-map", "ours-wds",
    "ours-noverify", "ours-wds-noverify",
)  # fmt: skip
BATCH_ROWS = 4096  # rows per pyarrow batch of the plain reader


class PlainParquet(IterableDataset):
    """Parquet parts split over DataLoader workers (strided), read with ``iter_batches``;
    each column converted once per batch (tensor columns zero-copy to torch), records yielded
    one by one as dicts."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import pyarrow.parquet as pq

        info = get_worker_info()
        w, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        for f in self.files[w::nw]:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS):
                names = batch.schema.names
                cols = [_column(batch.column(n)) for n in names]
                for vals in zip(*cols):
                    yield dict(zip(names, vals))


def _column(col: Any) -> Any:
    if hasattr(col, "to_numpy_ndarray"):  # arrow.fixed_shape_tensor
        with warnings.catch_warnings():  # the Arrow buffer is read-only; we never write to it
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(col.to_numpy_ndarray())
    return col.to_pylist()


def _hf(c: Copies) -> Any:
    import datasets as hfd

    parts = [hfd.Dataset.from_file(f) for f in c.hf_arrow_files()]
    return parts[0] if len(parts) == 1 else hfd.concatenate_datasets(parts)


def _litdata(c: Copies) -> Any:
    from litdata import StreamingDataset

    return StreamingDataset(str(c.litdata))


def set_verify(on: bool) -> None:
    """Switch the reader's checksum verification (DataLoader workers fork after it and inherit it)."""
    from torchx_datapipes.io import verify as _verify

    _verify.VERIFY = on


def _ours(wds: bool = False, verify: bool = True, **kw: Any) -> Callable[[Copies], Any]:
    def make(c: Copies) -> Any:
        from torchx_datapipes.data import OutputDataset

        set_verify(verify)
        return OutputDataset(str(c.ours_wds if wds else c.ours), **kw)

    return make


def _ours_map(limit: int) -> Callable[[Copies], Any]:
    def make(c: Copies) -> Any:
        from torchx_datapipes.data import OutputDataset

        set_verify(True)
        ds = OutputDataset.map_style(str(c.ours))
        return Subset(ds, range(limit)) if limit < len(ds) else ds

    return make


def expected_records(method: str, records: int, map_limit: int) -> int:
    """How many records (ids ``0 .. n-1``) a pass of ``method`` yields."""
    return min(records, map_limit) if method == "ours-map" else records


def build(method: str, c: Copies, parts: int, map_limit: int) -> Any:
    """The dataset object of ``method`` for the copies ``c``."""
    makers: dict[str, Callable[[Copies], Any]] = {
        "pyarrow": lambda c: PlainParquet(c.parquet_parts()),
        "litdata": _litdata,
        "hf-map": lambda c: _hf(c).with_format("torch"),
        "hf-iter": lambda c: _hf(c).to_iterable_dataset(num_shards=parts).with_format("torch"),
        "ours": _ours(),
        "ours-shuffle": _ours(shuffle=True, seed=0),
        "ours-map": _ours_map(map_limit),
        "ours-wds": _ours(wds=True),
        "ours-noverify": _ours(verify=False),
        "ours-wds-noverify": _ours(wds=True, verify=False),
    }
    return makers[method](c)
