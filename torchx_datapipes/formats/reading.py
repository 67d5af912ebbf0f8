"""Reading one unit: :class:`UnitReader` dispatches to the unit's format module (``formats/``).

What every format reports the same way (bad records, a cut stream, counts) is the reader's
:class:`~torchx_datapipes.formats.readstate.ReadState`. Formats are found through
:mod:`torchx_datapipes.formats.registry`.
"""

from typing import Any, Iterator, List, Optional, Sequence, Tuple

from torchx_datapipes.formats.base import DEFAULT_MAX_RECORD, compression_of, extra_hint, record_bytes
from torchx_datapipes.formats.extensions import detect_format
from torchx_datapipes.formats.readstate import JSONL_OBJECTS_ONLY, BadRecord, ReadState
from torchx_datapipes.formats.registry import input_class
from torchx_datapipes.formats.unit import Unit

__all__ = [
    "JSONL_OBJECTS_ONLY",
    "BadRecord",
    "ReadState",
    "UnitReader",
    "compression_of",
    "detect_format",
    "extra_hint",
    "record_bytes",
]


class UnitReader(ReadState):
    """Streams one unit's records in batches of ``(records, lines)``.

    ``lines`` are 1-based and local to the unit; :meth:`absolute` maps them to the file.
    Unparseable records are appended to ``bad`` (the caller decides whether to raise or
    skip); blank lines are counted.
    """

    def __init__(
        self,
        unit: Unit,
        batch_size: int = 1024,
        objects_only: bool = JSONL_OBJECTS_ONLY,
        max_record: int = DEFAULT_MAX_RECORD,
    ) -> None:
        super().__init__(unit, batch_size, objects_only, max_record)
        self.format = input_class(unit.format)()

    def absolute(self, line: int) -> int:
        """The file's line number for a unit-local one (counts the prefix lazily, on error only)."""
        return self.format.absolute(self, line)

    def location(self, line: int) -> Tuple[str, int]:
        """``(file, line in that file)`` of a unit-local location (a group of files: the file itself)."""
        return self.format.location(self, line)

    def members(self, line: int) -> Optional[str]:
        """The archive members a unit-local record came from (a tar shard's sample), else None."""
        return self.format.members(self, line)

    def batches(self) -> Iterator[Tuple[List[Any], Sequence[int]]]:
        """Batches of parsed records; ``self.records`` counts them as they go."""
        self.format.check_unchanged(self.unit)
        for recs, lines in self.format.read(self):
            self.records += len(recs)
            if self.on_batch is not None:
                self.on_batch(len(recs), self.bytes_done)
            yield recs, lines

    @property
    def columnar(self) -> bool:
        """Whether :meth:`arrow_batches` can read this unit (its format gives typed Arrow batches)."""
        return self.format.columnar

    def arrow_batches(self) -> Iterator[Tuple[Any, Sequence[int]]]:
        """Batches as typed ``pyarrow.RecordBatch`` es with their lines (only if :attr:`columnar`)."""
        self.format.check_unchanged(self.unit)
        for batch, lines in self.format.read_arrow(self):
            self.records += batch.num_rows
            if self.on_batch is not None:
                self.on_batch(batch.num_rows, self.bytes_done)
            yield batch, lines
