"""Per-format access to one part: its chunks, one chunk's records, given rows' records.

A chunk is a Parquet row group, or up to :data:`CHUNK_RECORDS` consecutive records of a JSON
Lines or WebDataset part. JSON Lines and tar parts get a record -> byte-range index built by
one sequential read of the part on first use, cached per process (never pickled).
"""

import tarfile
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
    table_columns,
    table_records,
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


class ParquetFormat:
    def _meta(self, part: Part, opts: ReadOptions) -> Any:
        key = (part.url, part.size)
        if key not in _PQ_META:
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
        return table_columns(self._read(part, [chunk], opts))

    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]:
        starts = np.concatenate([[0], np.cumsum(self.chunk_sizes(part, opts))])
        idx = np.asarray(rows, dtype=np.int64)
        groups = np.searchsorted(starts, idx, side="right") - 1
        needed = sorted(set(groups.tolist()))
        base = np.concatenate([[0], np.cumsum([starts[g + 1] - starts[g] for g in needed])])
        local = {g: base[i] - starts[g] for i, g in enumerate(needed)}
        take = np.array([i + local[g] for i, g in zip(idx, groups.tolist())], dtype=np.int64)
        table = self._read(part, needed, opts)
        return table_records(table.take(take))


# ---- JSON Lines ----------------------------------------------------------------------------

_LINE_INDEX: Dict[Tuple[str, int], np.ndarray] = {}


class JsonlFormat:
    def _index(self, part: Part, opts: ReadOptions) -> np.ndarray:
        """Byte offsets of each line start, plus the end: ``records + 1`` int64s."""
        key = (part.url, part.size)
        if key not in _LINE_INDEX:
            with _files.open_part(part, opts.storage_options, opts.cache_dir) as f:
                buf = np.frombuffer(f.read(), dtype=np.uint8)
            ends = np.flatnonzero(buf == 10) + 1
            if len(buf) and buf[-1] != 10:
                ends = np.append(ends, len(buf))
            index = np.concatenate([[0], ends]).astype(np.int64)
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
        data = _files.read_ranges(
            part, {0: (int(index[a]), int(index[b]))}, opts.storage_options, opts.cache_dir
        )
        return self._decode(data[0], opts)

    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]:
        index = self._index(part, opts)
        runs = _runs(rows)
        ranges = {i: (int(index[a]), int(index[b])) for i, (a, b) in enumerate(runs)}
        data = _files.read_ranges(part, ranges, opts.storage_options, opts.cache_dir)
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
                with tarfile.open(fileobj=f, mode="r:") as tar:
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
        data = _files.read_ranges(part, ranges, opts.storage_options, opts.cache_dir)
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
