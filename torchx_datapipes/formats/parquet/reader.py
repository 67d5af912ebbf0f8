"""Parquet parts: a chunk is a row group; columns decoded whole (see ``_arrow.py``)."""

from collections import OrderedDict
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats.chunks import Chunk, ReadOptions, Record
from torchx_datapipes.formats.records import Columns
from torchx_datapipes.io import partfiles as _files
from torchx_datapipes.io.part import Part

STREAM_ROWS = 4096  # rows decoded at a time when a row group is read in order
_PQ_META: Dict[Tuple[str, int], Any] = {}


def _arrow() -> Any:
    try:
        import pyarrow.parquet  # noqa: F401

        from torchx_datapipes.formats.parquet import records as arrow
    except ImportError as e:
        raise ImportError(
            "reading a Parquet output needs pyarrow: pip install 'torchx-datapipes[parquet]'"
        ) from e
    _fork_safe_pool()
    return arrow


def _fork_safe_pool() -> None:
    """Allocate Arrow memory with the system allocator in a process that reads Parquet outputs, unless
    the user chose a pool (``ARROW_DEFAULT_MEMORY_POOL``).

    DataLoader workers are forked from it, and a worker's thread that read Parquet (the read-ahead
    thread) crashed the worker when it exited, in Arrow's bundled jemalloc per-thread cleanup
    (``je_tsd_cleanup``, from a core dump): about 4% of resumed StatefulDataLoader epochs over a
    Parquet output in a stress loop. This pool alone did not prevent it (3 of 60 epochs still
    crashed with it, in a later loop); what did is that read-ahead threads never exit
    (``data/_prefetch.py``: 0 of 80). The pool stays: it keeps the workers off jemalloc's state
    inherited through ``fork``."""
    import os

    import pyarrow as pa

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or pa.default_memory_pool().backend_name == "system":
        return
    pa.set_memory_pool(pa.system_memory_pool())


class ParquetFormat:
    def _meta(self, part: Part, opts: ReadOptions) -> Any:
        key = (part.url, part.size)
        if key not in _PQ_META:
            _arrow()  # a missing pyarrow: the install hint
            import pyarrow.parquet as pq

            with _files.open_part(part, opts.storage_options, opts.cache_dir, True) as f:  # zero-copy
                _PQ_META[key] = pq.ParquetFile(f).metadata
        return _PQ_META[key]

    def schema_names(self, part: Part, opts: ReadOptions) -> List[str]:
        return list(self._meta(part, opts).schema.to_arrow_schema().names)

    def chunk_sizes(self, part: Part, opts: ReadOptions) -> List[int]:
        meta = self._meta(part, opts)
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if sum(sizes) != part.records:
            raise ReadError(
                f"{part.url} holds {sum(sizes)} rows but the manifest recorded {part.records}:"
                " the part was replaced after the commit; rerun the job"
            )
        return sizes

    def _read(self, part: Part, groups: List[int], opts: ReadOptions) -> Any:
        import pyarrow.parquet as pq

        cols = list(opts.columns) if opts.columns is not None else None
        with _files.open_part(part, opts.storage_options, opts.cache_dir, True) as f:  # zero-copy
            pf = pq.ParquetFile(f, metadata=self._meta(part, opts))
            return pf.read_row_groups(groups, columns=cols)

    def read_chunk(self, part: Part, chunk: int, opts: ReadOptions) -> Chunk:
        columns: Columns = _arrow().table_columns(self._read(part, [chunk], opts))
        return columns

    def stream_chunk(
        self, part: Part, chunk: int, start: int, stop: int, opts: ReadOptions
    ) -> Iterator[Chunk]:
        """Rows ``[start, stop)`` of row group ``chunk``, decoded :data:`STREAM_ROWS` at a time.

        For in-order reading: the first records are served before the whole row group (~64 MB)
        is decoded, and only a few batches are held at once.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrow = _arrow()
        cols = list(opts.columns) if opts.columns is not None else None
        with _files.open_part(part, opts.storage_options, opts.cache_dir, True) as f:  # zero-copy
            pf = pq.ParquetFile(f, metadata=self._meta(part, opts))
            pos = 0
            for batch in pf.iter_batches(batch_size=STREAM_ROWS, row_groups=[chunk], columns=cols):
                lo, hi = max(start - pos, 0), min(stop - pos, batch.num_rows)
                if lo < hi:
                    yield arrow.table_columns(pa.Table.from_batches([batch.slice(lo, hi - lo)]))
                pos += batch.num_rows
                if pos >= stop:
                    return

    def _groups(self, part: Part, groups: List[int], opts: ReadOptions) -> Dict[int, Any]:
        """Row groups as Arrow tables: recently used ones from a per-process LRU, the rest in one read."""
        keys = {g: (part.url, part.size, g, opts.columns) for g in groups}
        out = {g: _RG_CACHE[k] for g, k in keys.items() if k in _RG_CACHE}
        for g in out:
            _RG_CACHE.move_to_end(keys[g])
        missing = [g for g in groups if g not in out]
        if missing:
            table = self._read(part, missing, opts)
            sizes = self.chunk_sizes(part, opts)
            offset = 0
            for g in missing:
                out[g] = _RG_CACHE[keys[g]] = table.slice(offset, sizes[g])
                offset += sizes[g]
            _evict()
        return out

    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]:
        import pyarrow as pa

        starts = np.concatenate([[0], np.cumsum(self.chunk_sizes(part, opts))])
        idx = np.asarray(rows, dtype=np.int64)
        groups = np.searchsorted(starts, idx, side="right") - 1
        needed = sorted(set(groups.tolist()))
        base = np.concatenate([[0], np.cumsum([starts[g + 1] - starts[g] for g in needed])])
        local = {g: base[i] - starts[g] for i, g in enumerate(needed)}
        take = np.array([i + local[g] for i, g in zip(idx, groups.tolist())], dtype=np.int64)
        tables = self._groups(part, needed, opts)
        table = pa.concat_tables([tables[g] for g in needed])  # zero-copy: chunks side by side
        recs: List[Record] = _arrow().table_records(table.take(take))
        return recs


# map-style reads keep the last row groups they decoded (in-order batches hit one group many times)
RG_CACHE_BYTES = 256 << 20
_RG_CACHE: "OrderedDict[Tuple[str, int, int, Optional[Tuple[str, ...]]], Any]" = OrderedDict()


def _evict() -> None:
    total = sum(t.nbytes for t in _RG_CACHE.values())
    while len(_RG_CACHE) > 1 and total > RG_CACHE_BYTES:
        _, t = _RG_CACHE.popitem(last=False)
        total -= t.nbytes
