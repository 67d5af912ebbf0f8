"""Writing one part of any format: :class:`PartWriter` over the format's writer (``formats/writer.py``).

Each writer (a :class:`~torchx_datapipes.formats.writer.BasePart`) writes one part file
atomically and hashes it: ``write(records) -> failures`` (``(index, message)`` per record it
could not serialize), ``commit()``, ``abort()``, ``file_sum(rel)``. The format is found in the
one registry (``formats/registry.py``), so pyarrow is imported only for Parquet output.
"""

from typing import Any, Dict, Iterable, List, Optional

from torchx_datapipes.formats.jsonl.writer import dumps, encode_checked
from torchx_datapipes.formats.registry import get_format, writer_class
from torchx_datapipes.formats.writer import BasePart, Failures
from torchx_datapipes.io.layout import part_file

__all__ = ["BasePart", "Failures", "PartWriter", "dumps", "encode_checked", "part_name", "writer_class"]


def part_name(index: int, fmt: str, prefix: Optional[str] = None) -> str:
    ext = get_format(fmt).part_ext or writer_class(fmt).ext or fmt
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

    def write_encoded(
        self, lines: List[bytes], records: Optional[List[Any]] = None, skip: Iterable[int] = ()
    ) -> None:
        """Append records already encoded as JSON (JSON Lines output only); ``records``: what they
        encode, but for the indexes in ``skip`` (for the part's field types)."""
        write_encoded = getattr(self.part, "write_encoded", None)
        if write_encoded is None:
            raise TypeError(f"{self.fmt} output takes records, not encoded JSON lines")
        write_encoded(lines, records, skip)

    def commit_meta(self, rel: str) -> Dict[str, Any]:
        """The part's entries of the unit's commit record (its schema or field types)."""
        return self.part.commit_meta(rel)

    def commit(self) -> None:
        self.part.commit()

    def abort(self) -> None:
        self.part.abort()

    def file_sum(self, rel: str) -> Any:
        return self.part.file_sum(rel)

    def file_sums(self, rel: str) -> List[Any]:
        """The part's and its side files' sizes and checksums (a WebDataset part's offset index)."""
        return self.part.file_sums(rel)
