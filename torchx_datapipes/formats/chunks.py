"""What every part format provides, and what the formats share.

A chunk is a Parquet row group (``_parquet.py``), or consecutive records of a JSON Lines
(``_lines.py``) or WebDataset tar part (``_tar.py``): :data:`CHUNK_RECORDS` of them, fewer where
records are large, so that a chunk holds about :data:`CHUNK_BYTES` of the part
(:func:`chunk_records`). JSON Lines parts (and tar parts without the offset index their writer
commits) get a record -> byte-range index built by one sequential read of the part on first
use; indexes, footers and recently read bytes are cached per process (never pickled).
"""

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from torchx_datapipes.formats.records import Columns
from torchx_datapipes.io import partfiles as _files
from torchx_datapipes.io.part import Part

CHUNK_RECORDS = 4096
CHUNK_BYTES = 8 << 20  # stored bytes per JSON Lines / tar chunk, about (a chunk is read whole)
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


def chunk_records(part: Part) -> int:
    """Records per chunk of a JSON Lines or tar part, from the manifest's size and count alone.

    :data:`CHUNK_RECORDS`, or fewer so that a chunk is about :data:`CHUNK_BYTES`: a chunk is
    read and decoded whole before its first record is served and read-ahead holds a few, so
    4096 images (~50 MB) or audio clips (GBs) would delay the first batch and hold the memory.
    """
    if part.size <= CHUNK_BYTES or part.records <= 0:
        return CHUNK_RECORDS
    return max(1, min(CHUNK_RECORDS, CHUNK_BYTES * part.records // part.size))


def fixed_chunks(part: Part) -> List[int]:
    """The chunk sizes of a JSON Lines or tar part (every chunk full but the last)."""
    k, n = chunk_records(part), part.records
    return [min(k, n - s) for s in range(0, n, k)]


def chunk_span(part: Part, chunk: int) -> Tuple[int, int]:
    """Records ``[a, b)`` of chunk ``chunk`` of a JSON Lines or tar part."""
    k = chunk_records(part)
    return chunk * k, min(part.records, (chunk + 1) * k)


def runs(rows: Sequence[int]) -> List[Tuple[int, int]]:
    """Sorted unique rows as half-open runs ``[a, b)`` of consecutive rows."""
    out: List[Tuple[int, int]] = []
    for r in sorted(set(rows)):
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out


# ---- bytes of JSON Lines and tar parts ---------------------------------------------------

# The bytes read to build a part's offset index are kept (per process, LRU, bounded), so the
# chunks that follow are sliced from memory instead of being read a second time.
PART_BYTES_LIMIT = 256 << 20
INDEX_BLOCK = 64 << 20  # parts above the limit are indexed block by block
_PART_BYTES: "OrderedDict[Tuple[str, int], bytes]" = OrderedDict()


def remember(part: Part, data: bytes) -> None:
    if len(data) > PART_BYTES_LIMIT:
        return
    _PART_BYTES[(part.url, part.size)] = data
    total = sum(len(b) for b in _PART_BYTES.values())
    while total > PART_BYTES_LIMIT:
        _, old = _PART_BYTES.popitem(last=False)
        total -= len(old)


def part_bytes(part: Part) -> Optional[bytes]:
    """The part's bytes if this process keeps them (read whole to build its index), else None."""
    data = _PART_BYTES.get((part.url, part.size))
    if data is not None:
        _PART_BYTES.move_to_end((part.url, part.size))
    return data


def read_ranges(
    part: Part, ranges: Dict[int, Tuple[int, int]], storage_options: Any, cache_dir: Optional[str]
) -> Dict[int, bytes]:
    data = _PART_BYTES.get((part.url, part.size))
    if data is None:
        return _files.read_ranges(part, ranges, storage_options, cache_dir)
    _PART_BYTES.move_to_end((part.url, part.size))
    return {k: data[a:b] for k, (a, b) in ranges.items()}
