"""JSON Lines parts: chunks of consecutive lines, found with a per-process line index.

Lines are decoded by formats/jsonl/codec.py (``loads_lines``): exact big integers, and the tagged objects
of typed values (tensors, Decimal, dates, times) as those values, in blocks holding the tag bytes.
"""

from typing import Dict, List, Sequence, Tuple

import numpy as np

from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats import chunks as _formats
from torchx_datapipes.formats.chunks import ReadOptions, Record
from torchx_datapipes.formats.jsonl.codec import loads_lines
from torchx_datapipes.formats.records import project
from torchx_datapipes.io import partfiles as _files
from torchx_datapipes.io.part import Part

_LINE_INDEX: Dict[Tuple[str, int], np.ndarray] = {}


def _line_starts(part: Part, opts: ReadOptions) -> np.ndarray:
    """Offsets of each line start plus the end, from one sequential read in blocks."""
    ends: List[np.ndarray] = []
    offset, last = 0, 10
    with _files.open_part(part, opts.storage_options, opts.cache_dir) as f:
        whole = part.size <= _formats.PART_BYTES_LIMIT
        while True:
            block = f.read(-1 if whole else _formats.INDEX_BLOCK)
            if not block:
                break
            if whole:
                _formats.remember(part, block)
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
                raise ReadError(
                    f"{part.url} has {len(index) - 1} lines but the manifest recorded {part.records}"
                    " records: the part was modified after the commit; rerun the job"
                )
            _LINE_INDEX[key] = index
        return _LINE_INDEX[key]

    def chunk_sizes(self, part: Part, opts: ReadOptions) -> List[int]:
        return _formats.fixed_chunks(part)

    def _decode(self, data: bytes, opts: ReadOptions) -> List[Record]:
        return [project(rec, opts.columns) for rec in loads_lines(data)]

    def read_chunk(self, part: Part, chunk: int, opts: ReadOptions) -> List[Record]:
        index = self._index(part, opts)
        a, b = _formats.chunk_span(part, chunk)
        data = _formats.read_ranges(
            part, {0: (int(index[a]), int(index[b]))}, opts.storage_options, opts.cache_dir
        )
        return self._decode(data[0], opts)

    def read_rows(self, part: Part, rows: Sequence[int], opts: ReadOptions) -> List[Record]:
        index = self._index(part, opts)
        runs = _formats.runs(rows)
        ranges = {i: (int(index[a]), int(index[b])) for i, (a, b) in enumerate(runs)}
        data = _formats.read_ranges(part, ranges, opts.storage_options, opts.cache_dir)
        by_row: Dict[int, Record] = {}
        for i, (a, _) in enumerate(runs):
            for k, rec in enumerate(self._decode(data[i], opts)):
                by_row[a + k] = rec
        return [by_row[r] for r in rows]
