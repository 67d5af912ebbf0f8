"""What the text ops (dedup, decontaminate) share: a record's text field, ids in input order, locations.

Ids: inside a job a record is ``unit index << 32 | its 1-based line in the unit`` (:func:`uids`),
which orders records like the input (files sorted by path, then lines) and needs nothing but
the unit. Written out (the cluster field, the duplicates and matches tables) it becomes the
**stable id** ``file index << 40 | line in the file`` (the file's index in the sorted input files),
which does not depend on ``--unit_mb``: :class:`StableIds`, from the first pass's commit records
(each unit's lines, and the line offset of a unit that starts mid-file).
"""

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.formats.writing import PartWriter, encode_checked
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.fs import fs_and_path, join
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink

ID_SHIFT = 32  # internal id = unit index << 32 | line in the unit
FILE_SHIFT = 40  # stable id = file index << 40 | line in the file
LINE_FORMATS = ("jsonl", "text")  # a unit's lines = its records in + blank lines
_LINE_MASK = (1 << ID_SHIFT) - 1
Batches = Iterator[Tuple[List[Any], Sequence[int]]]


def uids(unit_index: int, lines: np.ndarray) -> np.ndarray:
    """The internal ids of a unit's records at ``lines`` (1-based, unit-local)."""
    return (np.int64(unit_index) << np.int64(ID_SHIFT)) | np.asarray(lines, dtype=np.int64)


def line_offset(unit: Unit, reader: UnitReader) -> Optional[int]:
    """Lines of the file before the unit's first: 0 at the file's start; None for a line format
    (summed from the earlier units' counts by :class:`StableIds`); else counted here."""
    if unit.start == 0:
        return 0
    if unit.format in LINE_FORMATS:
        return None
    return int(reader.absolute(1)) - 1


class StableIds:
    """Internal ids to the input's ``(file, line)`` and the stable id, from a pass's commit records
    (each with ``line_offset``, ``records_in`` and ``blank_lines``)."""

    def __init__(self, units: Sequence[Unit], metas: Sequence[Dict[str, Any]]) -> None:
        index = {p: i for i, p in enumerate(sorted({u.path for u in units}))}
        self.path: Dict[int, str] = {}
        self.file: Dict[int, int] = {}
        self.offset: Dict[int, int] = {}
        before: Dict[str, int] = {}  # per file: the lines of its units so far
        for m in sorted(metas, key=lambda m: int(m[ms.UNIT][ms.UNIT_INDEX])):
            u, path = int(m[ms.UNIT][ms.UNIT_INDEX]), str(m[ms.UNIT][ms.UNIT_PATH])
            offset = m[ms.LINE_OFFSET]
            offset = before.get(path, 0) if offset is None else int(offset)
            before[path] = offset + int(m[ms.RECORDS_IN]) + int(m[ms.BLANK_LINES])
            self.path[u], self.file[u], self.offset[u] = path, index[path], offset

    def location(self, uid: int) -> Tuple[str, int]:
        u = uid >> ID_SHIFT
        return self.path[u], self.offset[u] + (uid & _LINE_MASK)

    def stable(self, uid: int) -> int:
        u = uid >> ID_SHIFT
        return (self.file[u] << FILE_SHIFT) | (self.offset[u] + (uid & _LINE_MASK))


def write_records(writer: PartWriter, fmt: str, out: List[Any], lines: List[int], sink: ErrorSink) -> None:
    """Write ``out`` to a unit's part; a record the format cannot hold is a bad record at its line."""
    if fmt == "jsonl":
        encoded, bad = encode_checked(out)
        writer.write_encoded(encoded, out, (i for i, _ in bad))
    else:
        bad = writer.write(out)
    for i, err in bad:
        sink.record_failed(lines[i], out[i], TypeError(err), stage="serialize")


def prune_side_dir(output: str, side: str, metas: Sequence[Dict[str, Any]]) -> None:
    """Remove the files under ``OUT/side/`` that no committed unit lists (a failed earlier job's)."""
    fs, root = fs_and_path(join(output, side))
    if not fs.exists(root):
        return
    keep = {fs_and_path(join(output, str(f[ms.FILE_PATH])))[1] for m in metas for f in m.get(ms.FILES, [])}
    for p in fs.find(root):
        if p not in keep:
            fs.rm(p)


class TextField:
    """A record's text: ``record[field]`` (a str), or a text line itself (unless ``annotate``)."""

    def __init__(self, field: str, op: str = "dedup", annotate: bool = False) -> None:
        self.field, self.op, self.annotate = field, op, annotate

    def text(self, rec: Any) -> Optional[str]:
        if isinstance(rec, str) and not self.annotate:
            return rec  # a text input: the record is its text
        value = rec.get(self.field) if isinstance(rec, dict) else None
        return value if isinstance(value, str) else None

    def why(self, rec: Any) -> str:
        """Why ``rec`` has no text, and the fix."""
        if isinstance(rec, str):
            return "--action annotate needs object records (to add --cluster_field to), got a text line"
        if not isinstance(rec, dict):
            return f"the record is a {type(rec).__name__}, not an object with a text field {self.field!r}"
        if self.field not in rec:
            return (
                f"the record has no field {self.field!r} (its fields: {sorted(rec)[:10]}); pass --field with"
                " the field holding the text"
            )
        kind = type(rec[self.field]).__name__
        return f"field {self.field!r} is a {kind}, not a string; pass the --field holding the text"

    def stream(
        self, reader: UnitReader, sink: ErrorSink, fn: Optional[Callable[..., Any]] = None
    ) -> "TextStream":
        """The unit's records in batches (after ``fn``, a map or filter, if given), with lines and texts."""
        return TextStream(self, reader, sink, fn)

    def read(
        self, reader: UnitReader, sink: ErrorSink, fn: Optional[Callable[..., Any]] = None
    ) -> Tuple[List[int], List[Optional[str]]]:
        """Every record's line and text (None: a bad record, reported to ``sink``), in unit order."""
        lines: List[int] = []
        texts: List[Optional[str]] = []
        for where, got, _ in self.stream(reader, sink, fn):
            lines += where
            texts += got
        return lines, texts


class TextStream:
    """Iterates ``(lines, texts, records)`` batches of one unit; ``filtered``: records ``fn`` dropped."""

    def __init__(
        self, field: TextField, reader: UnitReader, sink: ErrorSink, fn: Optional[Callable[..., Any]]
    ) -> None:
        self.field, self.reader, self.sink = field, reader, sink
        self.applier = Applier(fn, sink.policy) if fn is not None else None

    @property
    def filtered(self) -> int:
        return self.applier.filtered if self.applier is not None else 0

    def __iter__(self) -> Iterator[Tuple[List[int], List[Optional[str]], List[Any]]]:
        last = 0
        for recs, where in self._batches():
            texts: List[Optional[str]] = []
            for rec, line in zip(recs, where):
                if self.applier is not None and line <= last:
                    raise DatapipesError(
                        f"{self.reader.unit.path}: --fn returned several records for one input record;"
                        f" {self.field.op} --fn must map a record to one record (or None to drop it):"
                        " flat-map it in a transform job first"
                    )
                last = line
                text = self.field.text(rec)
                if text is None:
                    self._bad(line, rec)
                texts.append(text)
            yield list(where), texts, recs

    def _bad(self, line: int, rec: Any) -> None:
        before, self.sink.fn_name = self.sink.fn_name, self.field.op  # reads "dedup raised ValueError: ..."
        try:
            self.sink.record_failed(line, rec, ValueError(self.field.why(rec)), stage=self.field.op)
        finally:
            self.sink.fn_name = before

    def _batches(self) -> Batches:
        if self.applier is not None:
            applier = self.applier
            for out in applier.run(self.reader.batches(), self.sink):
                yield out, [applier.line_of(i) for i in range(len(out))]
            return
        for recs, where in self.reader.batches():
            self.sink.drain_parse_errors()
            yield recs, where
        self.sink.drain_parse_errors()
