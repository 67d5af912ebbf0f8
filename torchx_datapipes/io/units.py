"""Work units: decided by the input alone, never by the world size.

A unit is a whole small file, a line-aligned byte range of a large uncompressed text
file, or a parquet row group. Units are assigned to (rank, worker) with
DistributedSampler's strided rule and no padding, so every record is read exactly once.
"""

import math
import posixpath
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

from torchx_datapipes.io.formats import Format, compression_of, detect_format
from torchx_datapipes.io.fs import stat

DEFAULT_UNIT_MB = 64


@dataclass(frozen=True)
class Unit:
    index: int
    path: str
    size: int  # bytes of the whole file
    start: int = 0  # byte range [start, end); end == -1 means to the end of the file
    end: int = -1
    row_group: int = -1  # parquet row group, or -1
    format: str = Format.JSONL.value
    mtime: float = -1.0  # the file's modification time when planned; -1 where the filesystem has none

    @property
    def nbytes(self) -> int:
        """Bytes this unit covers (its share of the input, for progress and balance)."""
        return (self.size if self.end < 0 else self.end) - self.start

    @property
    def name(self) -> str:
        return f"{self.index:05d}"

    def describe(self) -> str:
        base = posixpath.basename(self.path)
        if self.row_group >= 0:
            return f"{base}[row group {self.row_group}]"
        if self.start or self.end >= 0:
            return f"{base}[bytes {self.start}:{self.end if self.end >= 0 else self.size}]"
        return base

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


PlannedInput = Union[Tuple[str, int], Tuple[str, int, float]]


def plan_units(
    inputs: Sequence[PlannedInput], fmt: str = "auto", unit_mb: float = DEFAULT_UNIT_MB
) -> List[Unit]:
    """Cut ``(url, size)`` or ``(url, size, mtime)`` inputs (already sorted) into units.

    Each unit carries the size and modification time planned for its file (looked up here when
    only the size is given); the reader reads no further and refuses a file that shrank or was
    replaced since.
    """
    target = max(1, int(unit_mb * 1024 * 1024))
    units: List[Unit] = []
    for item in inputs:
        path, size = item[0], item[1]
        mtime = item[2] if len(item) > 2 else stat(path)[1]  # type: ignore[misc]
        f = detect_format(path) if fmt == "auto" else Format.parse(fmt)
        if f is Format.PARQUET:
            for rg in range(_parquet_row_groups(path)):
                units.append(Unit(len(units), path, size, row_group=rg, format=f.value, mtime=mtime))
            continue
        splittable = f in (Format.JSONL, Format.TEXT) and compression_of(path) is None
        pieces = max(1, math.ceil(size / target)) if splittable else 1
        if pieces == 1:
            units.append(Unit(len(units), path, size, format=f.value, mtime=mtime))
            continue
        step = math.ceil(size / pieces)
        for s in range(0, size, step):
            units.append(Unit(len(units), path, size, s, min(size, s + step), format=f.value, mtime=mtime))
    return units


def assign(units: Sequence[Unit], slot: int, slots: int) -> List[Unit]:
    """DistributedSampler's strided assignment without padding: ``units[slot::slots]``."""
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} out of range for {slots} slots")
    return list(units[slot::slots])


def _parquet_row_groups(path: str) -> int:
    from torchx_datapipes.io.formats import open_parquet

    with open_parquet(path) as pf:
        return int(pf.num_row_groups)
