"""Per-format access to one part: its chunks, one chunk's records, given rows' records.

A chunk is a Parquet row group, or up to :data:`CHUNK_RECORDS` consecutive records of a JSON
Lines or WebDataset part. JSON Lines and tar parts get a record -> byte-range index built by
one sequential read of the part on first use, cached per process (never pickled).
"""

import io
import tarfile
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import orjson

from torchx_datapipes.data import _files
from torchx_datapipes.data._decode import (
    Columns,
    member_field,
    member_value,
    project,
)
from torchx_datapipes.data._parts import Part

CHUNK_RECORDS = 4096
Record = Dict[str, Any]
Chunk = Union[List[Record], Columns]  # records (JSON Lines, tar) or columns (Parquet)


@dataclass(frozen=True)
class ReadOptions:
    storage_options: Optional[Mapping[str, Any]] = None
    cache_dir: Optional[str] = None
    columns: Optional[Tuple[str, ...]] = None


class PartFormat(Protocol):
    def chunk_sizes(self, part: Part, opts: ReadOptions) -> List[int]: ...
    def read_chunk(self, part: Part, chunk: int, opts: ReadOptions) -> Chunk: ...
    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]: ...


def _fixed_chunks(n: int) -> List[int]:
    return [min(CHUNK_RECORDS, n - s) for s in range(0, n, CHUNK_RECORDS)]


def _runs(rows: Sequence[int]) -> List[Tuple[int, int]]:
    """Sorted unique rows as half-open runs ``[a, b)`` of consecutive rows."""
    out: List[Tuple[int, int]] = []
    for r in sorted(set(rows)):
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out


# ---- Parquet -------------------------------------------------------------------------------

_PQ_META: Dict[Tuple[str, int], Any] = {}


def _arrow() -> Any:
    try:
        import pyarrow.parquet  # noqa: F401

        from torchx_datapipes.data import _arrow as arrow
    except ImportError as e:
        raise ImportError(
            "reading a Parquet output needs pyarrow: pip install 'torchx-datapipes[parquet]'"
        ) from e
    return arrow


class ParquetFormat:
    def _meta(self, part: Part, opts: ReadOptions) -> Any:
        key = (part.url, part.size)
        if key not in _PQ_META:
            _arrow()  # a missing pyarrow: the install hint
            import pyarrow.parquet as pq

            with _files.open_part(part, opts.storage_options, opts.cache_dir) as f:
                _PQ_META[key] = pq.ParquetFile(f).metadata
        return _PQ_META[key]

    def schema_names(self, part: Part, opts: ReadOptions) -> List[str]:
        return list(self._meta(part, opts).schema.to_arrow_schema().names)

    def chunk_sizes(self, part: Part, opts: ReadOptions) -> List[int]:
        meta = self._meta(part, opts)
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        if sum(sizes) != part.records:
            raise ValueError(
                f"{part.url} holds {sum(sizes)} rows but the manifest recorded {part.records}:"
                " the part was replaced after the commit; rerun the job"
            )
        return sizes

    def _read(self, part: Part, groups: List[int], opts: ReadOptions) -> Any:
        import pyarrow.parquet as pq

        cols = list(opts.columns) if opts.columns is not None else None
        with _files.open_part(part, opts.storage_options, opts.cache_dir) as f:
            pf = pq.ParquetFile(f, metadata=self._meta(part, opts))
            return pf.read_row_groups(groups, columns=cols)

    def read_chunk(self, part: Part, chunk: int, opts: ReadOptions) -> Chunk:
        columns: Columns = _arrow().table_columns(self._read(part, [chunk], opts))
        return columns

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


def clear_caches() -> None:
    """Forget this process's offset indexes, footers and cached row groups (tests, rewritten outputs)."""
    for cache in (_RG_CACHE, _PQ_META, _LINE_INDEX, _TAR_INDEX, _PART_BYTES):
        cache.clear()


# ---- bytes of JSON Lines and tar parts ---------------------------------------------------

# The bytes read to build a part's offset index are kept (per process, LRU, bounded), so the
# chunks that follow are sliced from memory instead of being read a second time.
PART_BYTES_LIMIT = 256 << 20
INDEX_BLOCK = 64 << 20  # parts above the limit are indexed block by block
_PART_BYTES: "OrderedDict[Tuple[str, int], bytes]" = OrderedDict()


def _remember(part: Part, data: bytes) -> None:
    if len(data) > PART_BYTES_LIMIT:
        return
    _PART_BYTES[(part.url, part.size)] = data
    total = sum(len(b) for b in _PART_BYTES.values())
    while total > PART_BYTES_LIMIT:
        _, old = _PART_BYTES.popitem(last=False)
        total -= len(old)


def _ranges(
    part: Part, ranges: Dict[int, Tuple[int, int]], storage_options: Any, cache_dir: Optional[str]
) -> Dict[int, bytes]:
    data = _PART_BYTES.get((part.url, part.size))
    if data is None:
        return _files.read_ranges(part, ranges, storage_options, cache_dir)
    _PART_BYTES.move_to_end((part.url, part.size))
    return {k: data[a:b] for k, (a, b) in ranges.items()}


# ---- JSON Lines ----------------------------------------------------------------------------

_LINE_INDEX: Dict[Tuple[str, int], np.ndarray] = {}


def _line_starts(part: Part, opts: ReadOptions) -> np.ndarray:
    """Offsets of each line start plus the end, from one sequential read in blocks."""
    ends: List[np.ndarray] = []
    offset, last = 0, 10
    with _files.open_part(part, opts.storage_options, opts.cache_dir) as f:
        whole = part.size <= PART_BYTES_LIMIT
        while True:
            block = f.read(-1 if whole else INDEX_BLOCK)
            if not block:
                break
            if whole:
                _remember(part, block)
            buf = np.frombuffer(block, dtype=np.uint8)
            ends.append(np.flatnonzero(buf == 10) + 1 + offset)
            offset, last = offset + len(buf), int(buf[-1])
            if whole:
                break
    if last != 10:  # a last line without a newline
        ends.append(np.array([offset]))
    return np.concatenate([[0], *ends]).astype(np.int64)


class JsonlFormat:
    def _index(self, part: Part, opts: ReadOptions) -> np.ndarray:
        """Byte offsets of each line start, plus the end: ``records + 1`` int64s."""
        key = (part.url, part.size)
        if key not in _LINE_INDEX:
            index = _line_starts(part, opts)
            if len(index) - 1 != part.records:
                raise ValueError(
                    f"{part.url} has {len(index) - 1} lines but the manifest recorded {part.records}"
                    " records: the part was modified after the commit; rerun the job"
                )
            _LINE_INDEX[key] = index
        return _LINE_INDEX[key]

    def chunk_sizes(self, part: Part, opts: ReadOptions) -> List[int]:
        return _fixed_chunks(part.records)

    def _decode(self, data: bytes, opts: ReadOptions) -> List[Record]:
        return [project(orjson.loads(line), opts.columns) for line in data.splitlines()]

    def read_chunk(self, part: Part, chunk: int, opts: ReadOptions) -> List[Record]:
        index = self._index(part, opts)
        a, b = chunk * CHUNK_RECORDS, min(part.records, (chunk + 1) * CHUNK_RECORDS)
        data = _ranges(part, {0: (int(index[a]), int(index[b]))}, opts.storage_options, opts.cache_dir)
        return self._decode(data[0], opts)

    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]:
        index = self._index(part, opts)
        runs = _runs(rows)
        ranges = {i: (int(index[a]), int(index[b])) for i, (a, b) in enumerate(runs)}
        data = _ranges(part, ranges, opts.storage_options, opts.cache_dir)
        by_row: Dict[int, Record] = {}
        for i, (a, _) in enumerate(runs):
            for k, rec in enumerate(self._decode(data[i], opts)):
                by_row[a + k] = rec
        return [by_row[r] for r in rows]


# ---- WebDataset tar ------------------------------------------------------------------------

# per record: its key and members (suffix, data offset, size), in tar order
_TarIndex = List[Tuple[str, List[Tuple[str, int, int]]]]
_TAR_INDEX: Dict[Tuple[str, int], _TarIndex] = {}


def _split_name(name: str) -> Tuple[str, str]:
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    return (name, "") if dot < 0 else (name[:dot], name[dot + 1 :])


class TarFormat:
    def _index(self, part: Part, opts: ReadOptions) -> _TarIndex:
        key = (part.url, part.size)
        if key not in _TAR_INDEX:
            index: _TarIndex = []
            with _files.open_part(part, opts.storage_options, opts.cache_dir) as f:
                src: Any = f
                if part.size <= PART_BYTES_LIMIT:
                    data = f.read()
                    _remember(part, data)
                    src = io.BytesIO(data)
                with tarfile.open(fileobj=src, mode="r:") as tar:  # headers only: data is seeked over
                    for info in tar:
                        if not info.isfile():
                            continue
                        k, suffix = _split_name(info.name)
                        if not index or index[-1][0] != k:
                            index.append((k, []))
                        index[-1][1].append((suffix, info.offset_data, info.size))
            if len(index) != part.records:
                raise ValueError(
                    f"{part.url} has {len(index)} samples but the manifest recorded {part.records}:"
                    " the part was modified after the commit; rerun the job"
                )
            _TAR_INDEX[key] = index
        return _TAR_INDEX[key]

    def chunk_sizes(self, part: Part, opts: ReadOptions) -> List[int]:
        return _fixed_chunks(part.records)

    def _records(self, part: Part, runs: List[Tuple[int, int]], opts: ReadOptions) -> Dict[int, Record]:
        index = self._index(part, opts)
        ranges = {}
        for i, (a, b) in enumerate(runs):
            last = index[b - 1][1][-1] if index[b - 1][1] else (index[b - 1][0], 0, 0)
            first = index[a][1][0][1] if index[a][1] else 0
            ranges[i] = (first, max(first, last[1] + last[2]))
        data = _ranges(part, ranges, opts.storage_options, opts.cache_dir)
        out: Dict[int, Record] = {}
        want = None if opts.columns is None else set(opts.columns)
        for i, (a, b) in enumerate(runs):
            base, buf = ranges[i][0], data[i]
            for r in range(a, b):
                k, members = index[r]
                rec: Record = {"__key__": k}
                for suffix, off, size in members:
                    field = member_field(suffix)
                    if want is None or field in want:
                        rec[field] = member_value(suffix, buf[off - base : off - base + size])
                out[r] = rec if want is None else {"__key__": k, **project(rec, opts.columns)}
        return out

    def read_chunk(self, part: Part, chunk: int, opts: ReadOptions) -> List[Record]:
        a, b = chunk * CHUNK_RECORDS, min(part.records, (chunk + 1) * CHUNK_RECORDS)
        recs = self._records(part, [(a, b)], opts)
        return [recs[r] for r in range(a, b)]

    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]:
        recs = self._records(part, _runs(rows), opts)
        return [recs[r] for r in rows]


def part_format(output_format: str) -> PartFormat:
    formats: Dict[str, PartFormat] = {
        "parquet": ParquetFormat(),
        "jsonl": JsonlFormat(),
        "webdataset": TarFormat(),
    }
    return formats[output_format]
