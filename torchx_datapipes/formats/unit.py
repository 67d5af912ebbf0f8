"""The unit of work: a piece of the input decided by the input alone, never by the world size."""

import posixpath
from dataclasses import dataclass, fields
from typing import Any, Dict, Optional

DEFAULT_UNIT_MB = 64


@dataclass(frozen=True)
class Unit:
    index: int
    path: str
    size: int  # bytes of the whole file (of all its files, for a group of files)
    start: int = 0  # byte range [start, end); end == -1 means to the end of the file
    end: int = -1
    row_group: int = -1  # parquet row group, or -1
    format: str = "jsonl"
    mtime: float = -1.0  # the file's modification time when planned; -1 where the filesystem has none
    # What the format decided when planning and every reader must use (JSON-serialisable): the
    # CSV schema, null markers and delimiter; the files of a group of files. None: nothing.
    read: Optional[Dict[str, Any]] = None

    def __hash__(self) -> int:
        return hash((self.index, self.path, self.start, self.end, self.row_group))

    @property
    def nbytes(self) -> int:
        """Bytes this unit covers (its share of the input, for progress and balance)."""
        return (self.size if self.end < 0 else self.end) - self.start

    @property
    def name(self) -> str:
        return f"{self.index:05d}"

    def describe(self) -> str:
        base = posixpath.basename(self.path)
        files = (self.read or {}).get("files")
        if files and len(files) > 1:
            return f"{len(files)} files from {base}"
        if self.row_group >= 0:
            return f"{base}[row group {self.row_group}]"
        if self.start or self.end >= 0:
            return f"{base}[bytes {self.start}:{self.end if self.end >= 0 else self.size}]"
        return base

    def to_json(self) -> Dict[str, Any]:
        # shallow: asdict() deep-copies ``read`` (a group's file list) of every unit of the plan
        return {f.name: getattr(self, f.name) for f in fields(self)}
