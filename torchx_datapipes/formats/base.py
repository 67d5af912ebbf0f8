"""What an input format is: the extensions it owns, how it plans units, how it reads one.

A format module defines one :class:`InputFormat` subclass; its ``Format`` names it as its
``input`` (``formats/format.py``, ``formats/registry.py``). Planning runs once, on rank 0, and
the plan is shared; reading runs per unit on any rank and may only use what the unit carries
(``Unit.read``).
"""

import contextlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import fsspec
from fsspec.utils import infer_compression

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io.fs import stat
from torchx_datapipes.io.streams import open_capped
from torchx_datapipes.plugins import missing_extra

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState

Batches = Iterator[Tuple[List[Any], Sequence[int]]]
ArrowBatches = Iterator[Tuple[Any, Sequence[int]]]  # (pyarrow.RecordBatch, lines)
PlannedFile = Tuple[str, int, float]  # url, size, mtime
BOM = b"\xef\xbb\xbf"
SUPPORTED_COMPRESSIONS = ("gzip", "zstd", "bz2", "xz")
DEFAULT_MAX_RECORD_MB = 64.0  # --max_record_mb: the record bound (ops/common.py documents it)


def record_bytes(mb: float) -> int:
    """The record bound in bytes for ``--max_record_mb`` (MiB)."""
    return max(1, int(mb * (1 << 20)))


DEFAULT_MAX_RECORD = record_bytes(DEFAULT_MAX_RECORD_MB)


def too_large(what: str, size: int, limit: int, at_least: bool = False) -> str:
    """The error of a record over the bound: its size, the bound and the fix."""
    more = "at least " if at_least else ""
    return (
        f"{what} is {more}{size:,} bytes, over the record bound of {limit:,} bytes (--max_record_mb"
        f" {limit / (1 << 20):g}); shorten or split the record, or raise --max_record_mb"
    )


def extra_hint(extra: str, module: str) -> ImportError:
    return missing_extra(f"{module} is not installed", extra)


def compression_of(path: str) -> Optional[str]:
    """The codec fsspec infers from the file name (``gzip``, ``zstd``, ``bz2``, ``xz``, ...), or None."""
    comp = infer_compression(path)
    return "xz" if comp == "lzma" else comp


def stem_of(path: str) -> str:
    """The name without a compression suffix fsspec recognises (``a.csv.gz`` -> ``a.csv``)."""
    if compression_of(path) is None:
        return path
    return path.rsplit(".", 1)[0]


@dataclass(frozen=True)
class ReadOptions:
    """Format options given by the user (``--schema``, ``--na_values``, ``--delimiter``)."""

    schema: Dict[str, str] = field(default_factory=dict)
    na_values: Optional[Tuple[str, ...]] = None  # None: the format's default null markers
    delimiter: str = ""  # "": the format's default for the file (``,``; tab for .tsv)
    max_record: int = DEFAULT_MAX_RECORD  # the record bound in bytes (``--max_record_mb``)
    header: bool = True  # False (``--header false``): CSV files without a header row, columns 0..n-1


@contextlib.contextmanager
def open_unit_stream(path: str, cap: int, buffered: bool = True) -> Iterator[Tuple[Any, Any]]:
    """The file's bytes up to ``cap`` (the planned size), decompressed: ``(stream, raw)``."""
    comp = compression_of(path)
    if comp is not None and comp not in SUPPORTED_COMPRESSIONS:
        raise InputError(
            f"{path}: {comp} compression is not supported for input; recompress it with gzip, zstd, bz2 or xz"
        )
    if comp == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError as e:
            raise extra_hint("zstd", "zstandard") from e
    with fsspec.open(path, "rb") as fh:
        stream, raw = open_capped(fh, cap, comp, buffered, path)
        yield stream, raw


def check_unchanged(path: str, planned_size: int, planned_mtime: float, strict: bool = False) -> None:
    """Refuse a file that shrank or was replaced since planning (growth is fine unless ``strict``)."""
    try:
        size, mtime = stat(path)
    except FileNotFoundError as e:
        raise InputError(
            f"{path} changed during the run (deleted): planned {planned_size} bytes, now missing;"
            " restore it, or rerun to plan again without it"
        ) from e
    moved = planned_mtime >= 0 and mtime >= 0 and mtime != planned_mtime
    if (
        size < planned_size
        or (moved and (size == planned_size or strict))
        or (strict and size != planned_size)
    ):
        what = (
            "shrank" if size < planned_size else "was replaced" if size == planned_size else "was rewritten"
        )
        times = f", modified at {planned_mtime:.6f} then, {mtime:.6f} now" if moved else ""
        raise InputError(
            f"{path} changed during the run ({what}): planned {planned_size} bytes, now {size}{times};"
            " rerun to plan again (and do not write into the inputs of a running job)"
        )


class InputFormat:
    """One input format. Subclasses set ``name``/``extensions`` and implement :meth:`read`."""

    name: ClassVar[str] = ""
    extensions: ClassVar[Tuple[str, ...]] = ()  # lower-case, with the dot; matched after compression
    splittable: ClassVar[bool] = False  # uncompressed files may be cut into line-aligned byte ranges
    strict_unchanged: ClassVar[bool] = False  # any change to the file is refused (footers move)

    def plan(self, files: Sequence[PlannedFile], target: int, opts: ReadOptions) -> List[Unit]:
        """Units for this format's files (index 0..n-1; the planner renumbers). Default: per file."""
        units: List[Unit] = []
        for path, size, mtime in files:
            pieces = (
                max(1, math.ceil(size / target)) if self.splittable and compression_of(path) is None else 1
            )
            if pieces == 1:
                units.append(Unit(0, path, size, format=self.name, mtime=mtime))
                continue
            step = math.ceil(size / pieces)
            for s in range(0, size, step):
                units.append(Unit(0, path, size, s, min(size, s + step), format=self.name, mtime=mtime))
        return units

    def check_unchanged(self, unit: Unit) -> None:
        check_unchanged(unit.path, unit.size, unit.mtime, self.strict_unchanged)

    columnar: ClassVar[bool] = False  # read_arrow gives typed pyarrow record batches

    def read(self, reader: "ReadState") -> Batches:
        raise NotImplementedError

    def read_arrow(self, reader: "ReadState") -> ArrowBatches:
        """The records as typed ``pyarrow.RecordBatch`` es (formats with ``columnar = True``)."""
        raise NotImplementedError(f"the {self.name} format has no columnar reader; use read()")

    def absolute(self, reader: "ReadState", line: int) -> int:
        """The file's line (row, sample) number for a unit-local one."""
        return line

    def location(self, reader: "ReadState", line: int) -> Tuple[str, int]:
        """``(file, line)`` of a unit-local location: formats whose units span files override it."""
        return reader.unit.path, self.absolute(reader, line)

    def members(self, reader: "ReadState", line: int) -> Optional[str]:
        """The archive members of a unit-local record, for errors: formats reading archives override it."""
        return None
