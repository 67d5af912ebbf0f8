"""``OutputMapDataset``: a committed output by global index, one read per part per batch.

Index ``i`` counts records over the selected parts in unit order (the order of
``OutputDataset(shuffle=False)``). ``__getitems__`` (used by DataLoader for a whole batch)
groups the indices by part and reads each part once: the needed Parquet row groups then
``take``; JSON Lines and tar byte ranges from the part's offset index.
"""

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch.utils.data

from torchx_datapipes.data import _args
from torchx_datapipes.data._columns import check_columns_exist
from torchx_datapipes.data._order import distinct
from torchx_datapipes.data._parts import Part, load_parts
from torchx_datapipes.formats.chunks import ReadOptions, Record
from torchx_datapipes.formats.registry import part_reader


class OutputMapDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Random access to the records of a committed output (see ``OutputDataset.map_style``)."""

    def __init__(
        self,
        url: str,
        split: Optional[str] = None,
        *,
        columns: Optional[Sequence[str]] = None,
        storage_options: Optional[Dict[str, Any]] = None,
        cache_dir: Optional[str] = None,
    ) -> None:

        _args.check_location(url, split, storage_options, cache_dir)
        self.url, self.split = url, split
        self._opts = ReadOptions(storage_options, cache_dir, _args.check_columns(columns))
        self._format, parts = load_parts(url, split, storage_options)
        self._parts: tuple[Part, ...] = tuple(parts)
        check_columns_exist(self._format, parts, self._opts)
        self._starts = np.concatenate([[0], np.cumsum([p.records for p in parts])]).astype(np.int64)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _check(self, i: Any) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"index {i!r}: expected an int")
        n = len(self)
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"index {i} is out of range for {self.url} ({n} records)")
        return j

    def __getitem__(self, i: int) -> Record:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> List[Record]:
        idx = np.array([self._check(i) for i in indices], dtype=np.int64)
        part_of = np.searchsorted(self._starts, idx, side="right") - 1
        fmt = part_reader(self._format)
        out: List[Optional[Record]] = [None] * len(idx)
        for p in distinct(part_of):
            where = np.flatnonzero(part_of == p)
            rows = (idx[where] - self._starts[p]).tolist()
            for k, rec in zip(where.tolist(), fmt.read_rows(self._parts[p], rows, self._opts)):
                out[k] = rec
        return [r for r in out if r is not None]

    def __repr__(self) -> str:
        return f"OutputMapDataset({self.url!r}, split={self.split!r}, {len(self)} records)"
