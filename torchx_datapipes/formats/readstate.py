"""The state of reading one unit that every format reports the same way (:class:`ReadState`).

Bad records (``bad``), a cut or damaged stream (``unit_errors``, ``bad_units``, ``lost_bytes``),
blank lines, renamed keys, counts and bytes read. Input formats (``formats/base.py`` and each
format module) are handed a :class:`ReadState`; :class:`~torchx_datapipes.formats.reading.UnitReader`
adds the dispatch to the unit's format. Apart so that ``base.py`` can name it without a cycle.
"""

import sys
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io.streams import TruncatedError

_WARN_RENAMED_KEYS = 20  # renamed keys warned about per unit (all are counted)

# JSON Lines records must be objects: a line holding a list, null, a number or a string is a
# bad record (stage parse). A reader built with objects_only=False yields any JSON value.
JSONL_OBJECTS_ONLY = True


@dataclass
class BadRecord:
    """An input record that could not be parsed (or later, transformed)."""

    line: int  # 1-based line (row for parquet, sample for tar shards, file for file groups)
    error: str
    raw: str
    stage: str = "parse"
    fix: str = ""  # a unit error's own fix (default: the one of a cut compressed stream)


class ReadState:
    """What a format reads into: the unit, its limits, and the counters and bad records it reports."""

    def __init__(self, unit: Unit, batch_size: int, objects_only: bool, max_record: int) -> None:
        self.unit = unit
        self.max_record = max(1, max_record)  # bytes: a longer record is a bad record (--max_record_mb)
        self.batch_size = max(1, batch_size)
        self.objects_only = objects_only
        self.bad: List[BadRecord] = []
        self.blank = 0
        self.skipped_members = 0  # archive members skipped without being a record (tar links)
        self.renamed_keys = 0  # JSON object keys renamed because the object repeated them (x -> x.1)
        self.records = 0
        self.bytes_done = 0
        self.bytes_read = 0  # raw (compressed, if so) bytes read from the file, boundary lines included
        self.bad_units = 0  # 1 when the unit's compressed stream was cut or corrupt
        self.lost_bytes = 0  # the raw bytes that could not be read (the unit's nbytes when unknown)
        self.unit_errors: List[BadRecord] = []  # stage "unit" (not records: not in ``bad``/records_in)
        self.on_batch: Optional[Callable[[int, int], None]] = None  # progress hook: (records, bytes)
        self._first_line_pos = 0
        self._line_offset: Optional[int] = None

    def add_bad(self, line: int, error: str, raw: str) -> None:
        self.bad.append(BadRecord(line, error, raw))

    def renamed(self, line: int, found: Sequence[Tuple[str, str]], what: str = "line") -> None:
        """A JSON object repeated keys, renamed as ``found`` (``(from, to)``): counted, and the first
        few warned, naming the file and line (formats/jsonl/dupkeys.py)."""
        if self.renamed_keys < _WARN_RENAMED_KEYS:
            pairs = ", ".join(f"{a!r} -> {b!r}" for a, b in found)
            print(
                f"warning: {self.unit.path}, {what} {line}: repeated JSON keys renamed: {pairs} (like"
                " pandas renames CSV headers; use the new names in your function; the manifest counts"
                " them as renamed_keys)",
                file=sys.stderr,
                flush=True,
            )
        self.renamed_keys += len(found)

    def damaged(self, line: int, error: str, lost: int, fix: str) -> None:
        """A part of the unit could not be decoded (a corrupt Parquet page): one bad unit."""
        self.bad_units = 1
        self.lost_bytes = lost
        self.unit_errors.append(BadRecord(line, error, "", "unit", fix))

    def cut(self, e: Exception, lines_read: int, consumed: int) -> None:
        """The compressed stream ended early or broke: one bad unit, and what it cost."""
        self.bad_units = 1
        unread = self.unit.size - consumed
        self.lost_bytes = unread if unread > 0 else self.unit.nbytes
        what = "ends early (truncated?)" if isinstance(e, TruncatedError) else "is corrupt"
        msg = f"compressed stream {what} after {lines_read} lines ({e})"
        self.unit_errors.append(BadRecord(lines_read, msg, "", "unit"))
