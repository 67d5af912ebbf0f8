"""Output writers, one module per format, chosen by name from a registry.

Each writer (a :class:`~torchx_datapipes.io.writers.base.BasePart`) writes one part file
atomically and hashes it: ``write(records) -> failures`` (``(index, message)`` per record it
could not serialize), ``commit()``, ``abort()``, ``file_sum(rel)``. The table below holds
import strings, so pyarrow is imported only for Parquet output; :func:`register_writer` adds
one from code, the entry-point group ``torchx_datapipes.writers`` from a package::

    [project.entry-points."torchx_datapipes.writers"]
    myfmt = "my_pkg.writer:MyPart"     # a BasePart subclass with an ``ext``
"""

import functools
import importlib
from importlib.metadata import entry_points
from typing import Any, Dict, List, Optional, Tuple, Type, Union

from torchx_datapipes.io.layout import part_file
from torchx_datapipes.io.writers.base import BasePart, Failures
from torchx_datapipes.io.writers.jsonl import dumps, encode_checked

ENTRY_POINT_GROUP = "torchx_datapipes.writers"
_W = "torchx_datapipes.io.writers."
_KNOWN: Dict[str, str] = {
    "jsonl": _W + "jsonl:JsonlPart",
    "parquet": _W + "parquet:ParquetPart",
    "webdataset": _W + "webdataset:WebDatasetPart",
}
_EXTS = {"jsonl": "jsonl", "parquet": "parquet", "webdataset": "tar"}
_REGISTERED: Dict[str, Union[str, Type[BasePart]]] = {}
OUTPUT_FORMATS = tuple(_KNOWN)

__all__ = [
    "OUTPUT_FORMATS", "BasePart", "Failures", "PartWriter", "dumps", "encode_checked", "part_name",
    "register_writer", "writer_class", "writer_names",
]  # fmt: skip


def register_writer(name: str, cls: Union[str, Type[BasePart]]) -> None:
    """Make ``--output_format name`` write with ``cls`` (a BasePart subclass or ``"module:Class"``)."""
    _REGISTERED[name] = cls


@functools.cache
def _entry_points() -> Tuple[Tuple[str, str], ...]:
    """The group's ``(name, "module:Class")``, listed once per process: entry_points() scans every
    installed distribution (~20 ms) and was called for every part (40 times for 10,000 images)."""
    return tuple((ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP))


def _table() -> Dict[str, Union[str, Type[BasePart]]]:
    table: Dict[str, Union[str, Type[BasePart]]] = dict(_KNOWN)
    for name, value in _entry_points():
        table.setdefault(name, value)
    table.update(_REGISTERED)
    return table


def writer_names() -> Tuple[str, ...]:
    """Every ``--output_format`` name: built-ins, entry points and ``register_writer`` ones."""
    return tuple(_table())


def writer_class(fmt: str) -> Type[BasePart]:
    table = _table()
    if fmt not in table:
        raise ValueError(
            f"unknown output format {fmt!r}; use one of {', '.join(table)} (a plug-in adds one with"
            f" register_writer or the entry-point group {ENTRY_POINT_GROUP!r})"
        )
    ref = table[fmt]
    if not isinstance(ref, str):
        return ref
    mod, _, name = ref.partition(":")
    cls: Type[BasePart] = getattr(importlib.import_module(mod), name)
    return cls


def part_name(index: int, fmt: str, prefix: Optional[str] = None) -> str:
    ext = _EXTS.get(fmt) or writer_class(fmt).ext or fmt
    name = part_file(index, ext)
    return f"{prefix}/{name}" if prefix else name


class PartWriter:
    """The writer of ``fmt`` for one part at ``url`` (see the module docstring for the interface)."""

    def __init__(self, url: str, fmt: str = "jsonl", key_prefix: Optional[str] = None) -> None:
        self.fmt = fmt
        self.part: BasePart = writer_class(fmt)(url, key_prefix)
        self.url = url

    @property
    def records(self) -> int:
        return self.part.records

    @property
    def schema(self) -> Optional[bytes]:
        return self.part.schema

    def write(self, recs: List[Any]) -> Failures:
        return self.part.write(recs)

    def write_encoded(self, lines: List[bytes]) -> None:
        """Append records already encoded as JSON (JSON Lines output only)."""
        write_encoded = getattr(self.part, "write_encoded", None)
        if write_encoded is None:
            raise TypeError(f"{self.fmt} output takes records, not encoded JSON lines")
        write_encoded(lines)

    def commit(self) -> None:
        self.part.commit()

    def abort(self) -> None:
        self.part.abort()

    def file_sum(self, rel: str) -> Any:
        return self.part.file_sum(rel)

    def file_sums(self, rel: str) -> List[Any]:
        """The part's and its side files' sizes and checksums (a WebDataset part's offset index)."""
        return self.part.file_sums(rel)
