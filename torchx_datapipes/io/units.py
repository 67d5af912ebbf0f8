"""Work units: decided by the input alone, never by the world size.

A unit is a whole small file, a line-aligned byte range of a large uncompressed text
file, or a parquet row group. Units are assigned to (rank, worker) with
DistributedSampler's strided rule and no padding, so every record is read exactly once.
"""

import math
import posixpath
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Sequence, Tuple

from torchx_datapipes.io.formats import Format, compression_of, detect_format

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


def plan_units(
    inputs: Sequence[Tuple[str, int]], fmt: str = "auto", unit_mb: float = DEFAULT_UNIT_MB
) -> List[Unit]:
    """Cut ``(url, size)`` inputs (already sorted) into units."""
    target = max(1, int(unit_mb * 1024 * 1024))
    units: List[Unit] = []
    for path, size in inputs:
        f = detect_format(path) if fmt == "auto" else Format.parse(fmt)
        if f is Format.PARQUET:
            for rg in range(_parquet_row_groups(path)):
                units.append(Unit(len(units), path, size, row_group=rg, format=f.value))
            continue
        splittable = f in (Format.JSONL, Format.TEXT) and compression_of(path) is None
        pieces = max(1, math.ceil(size / target)) if splittable else 1
        if pieces == 1:
            units.append(Unit(len(units), path, size, format=f.value))
            continue
        step = math.ceil(size / pieces)
        for s in range(0, size, step):
            units.append(Unit(len(units), path, size, s, min(size, s + step), format=f.value))
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
