"""The shingle rows of the dedup map pass, read back by id in the verify and route passes.

The map pass writes, per input unit, one spill file ``_exchange/shingles/u-UUUUU.bin`` with the
columns ``id`` (sorted), ``len`` and ``values`` (the concatenated sorted shingle hashes). A verify or
route task needs the rows of the ids in its partition only, which lie in every unit. Reading each
whole unit file per task would read the corpus' shingles once per partition: quadratic, as the
partitions grow with the input. :class:`ShingleRows` instead reads a unit's ``id`` and ``len``
columns once per process (16 bytes a text; at most :data:`INDEX_BUDGET` bytes of them are kept, the
oldest dropped), then only the byte ranges of the rows asked for, neighbouring rows in one range
(:data:`GAP_VALUES`). Bytes read: the indexes once per process and pass while they fit the budget,
plus the rows each task needs.
"""

from typing import Any, Dict, Tuple

import numpy as np

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.fs import fs_and_path, join
from torchx_datapipes.runner import exchange
from torchx_datapipes.runner.textfield import ID_SHIFT

GAP_VALUES = 4096  # rows closer than this many shingles (32 KiB) are read in one range
INDEX_BUDGET = 256 << 20  # bytes of unit indexes kept per process; the oldest are dropped beyond it

_RELAUNCH = "remove the output's _exchange/ directory and relaunch"
_Index = Tuple[exchange.ColumnLayout, np.ndarray, np.ndarray]  # layout, ids, row offsets (len + 1)


def shingle_rel(unit_index: int) -> str:
    return f"{exchange.EXCHANGE_DIR}/shingles/u-{unit_index:05d}.bin"


class ShingleRows:
    """``rows(ids)``: id -> its sorted uint64 shingle hashes, from the map pass's unit files."""

    def __init__(self, output: str) -> None:
        self.output = output
        self._index: Dict[int, _Index] = {}  # per unit, filled on first use in each process

    def rows(self, ids: np.ndarray) -> Dict[int, np.ndarray]:
        out: Dict[int, np.ndarray] = {}
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        units = ids >> np.int64(ID_SHIFT)
        for u in np.unique(units).tolist():
            url = join(self.output, shingle_rel(u))
            fs, path = fs_and_path(url)
            with fs.open(path, "rb") as fh:
                layout, have, offsets = self._index_of(u, fh, fs, path, url)
                want = ids[units == u]
                pos = np.searchsorted(have, want)
                if (pos >= len(have)).any() or (have[np.minimum(pos, len(have) - 1)] != want).any():
                    raise DatapipesError(f"{url} lacks ids of its unit: {_RELAUNCH}")
                starts, ends = offsets[pos], offsets[pos + 1]
                breaks = np.flatnonzero(starts[1:] - ends[:-1] > GAP_VALUES) + 1
                for lo, hi in zip(np.r_[0, breaks].tolist(), np.r_[breaks, len(want)].tolist()):
                    base = int(starts[lo])
                    block = exchange.read_rows(fh, layout, "values", base, int(ends[hi - 1]))
                    for i, a, b in zip(want[lo:hi].tolist(), starts[lo:hi].tolist(), ends[lo:hi].tolist()):
                        out[i] = block[a - base : b - base]
        return out

    def _index_of(self, unit: int, fh: Any, fs: Any, path: str, url: str) -> _Index:
        got = self._index.get(unit)
        if got is None:
            layout = exchange.column_layout(fh, url, int(fs.size(path)))
            if set(layout.columns) != {"id", "len", "values"}:
                raise DatapipesError(f"{url} is not a shingle file: {_RELAUNCH}")
            n = layout.columns["id"][1]
            have = exchange.read_rows(fh, layout, "id", 0, n)
            lengths = exchange.read_rows(fh, layout, "len", 0, n)
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            if offsets[-1] != layout.columns["values"][1]:
                raise DatapipesError(f"{url}: its lengths do not sum to its values: {_RELAUNCH}")
            got = self._index[unit] = (layout, have, offsets)
            while (
                len(self._index) > 1
                and sum(h.nbytes + o.nbytes for _, h, o in self._index.values()) > INDEX_BUDGET
            ):
                del self._index[next(iter(self._index))]
        return got
