"""The on_error policy: raise with file, line and traceback, or route bad records to ``_errors/``."""

import enum
import traceback
from typing import Any, Dict, List, Optional

import orjson

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats.jsonl.codec import dumps
from torchx_datapipes.formats.reading import BadRecord, UnitReader
from torchx_datapipes.io.checksum import FileSum, write_summed
from torchx_datapipes.io.fs import join
from torchx_datapipes.io.layout import ERRORS_DIR, error_part


class OnError(str, enum.Enum):
    RAISE = "raise"
    SKIP = "skip"

    @classmethod
    def parse(cls, value: str) -> "OnError":
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"--on_error must be 'raise' or 'skip', got {value!r}") from None


class RecordError(InputError):
    """A record failed under ``on_error=raise``; the message is the whole story."""

    def __reduce__(self) -> Any:
        return (type(self), self.args)


def user_traceback(e: BaseException) -> str:
    """The traceback of ``e`` without our own frame on top.

    cloudpickle replaces ``co_filename`` of by-value code with ``<dynamic-code>`` (to keep
    payloads deterministic); line numbers survive, so we restore the file name and source
    line from the function's ``__file__`` global when that file is readable here.
    """
    tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
    frames = []
    walk = tb
    while walk is not None:
        frame = walk.tb_frame
        summary = traceback.FrameSummary(
            frame.f_code.co_filename, walk.tb_lineno, frame.f_code.co_name, lookup_line=False
        )
        if summary.filename == "<dynamic-code>":
            origin = frame.f_globals.get("__file__")
            if isinstance(origin, str):
                summary = traceback.FrameSummary(origin, walk.tb_lineno, summary.name, lookup_line=False)
        frames.append(summary)
        walk = walk.tb_next
    stack = traceback.StackSummary.from_list(frames)
    return (
        "Traceback (most recent call last):\n"
        + "".join(stack.format())
        + "".join(traceback.format_exception_only(type(e), e))
    )


class ErrorSink:
    """Collects one unit's bad records and applies the policy."""

    def __init__(self, reader: UnitReader, policy: OnError, output: str, fn_name: str = "fn") -> None:
        self.reader, self.policy, self.output, self.fn_name = reader, policy, output, fn_name
        self.items: List[Dict[str, Any]] = []
        self._seen_parse = self._seen_unit = 0
        self.file: Optional[FileSum] = None  # the committed _errors/ part, if any

    @property
    def path(self) -> str:
        return self.reader.unit.path

    @property
    def where(self) -> str:
        """The whole unit, for messages about all of it: its file, or a group's first and last file."""
        files = (self.reader.unit.read or {}).get("files")
        if files and len(files) > 1:
            return f"{files[0][0]} .. {files[-1][0]} ({len(files)} files)"
        return self.path

    def drain_parse_errors(self) -> None:
        """Take the reader's parse failures (raising on the first under ``raise``)."""
        new = self.reader.bad[self._seen_parse :]
        self._seen_parse = len(self.reader.bad)
        for b in new:
            self._add(b)
        units = self.reader.unit_errors[self._seen_unit :]
        self._seen_unit = len(self.reader.unit_errors)
        for b in units:
            self._bad_unit(b)

    def record_failed(self, line: int, rec: Any, e: BaseException, stage: str = "transform") -> None:
        tb = None if stage == "serialize" else user_traceback(e)  # a writer's refusal: no user code ran
        raw = _dump(rec)
        self._add(BadRecord(line, f"{type(e).__name__}: {e}", raw, stage), tb)

    def _add(self, b: BadRecord, tb: Optional[str] = None) -> None:
        # the record's own file (a group of files: that file, not the unit's first) and line there
        path, line = self.reader.location(b.line)
        members = self.reader.members(b.line)
        if self.policy is OnError.RAISE:
            what = "cannot parse record" if b.stage == "parse" else f"{self.fn_name} raised {b.error}"
            if b.stage == "serialize":
                what = f"cannot write the output record: {b.error}"
            msg = f"{path}, line {line}" + (f" (members {members})" if members else "") + f": {what}"
            if b.stage == "parse":
                msg += f": {b.error}"
            msg += f"\n  record: {b.raw[:300]}"
            if tb:
                msg += f"\n  traceback of your function:\n{tb}"
            msg += (
                f"\n  fix: correct the record, or rerun with --on_error skip to write bad records to"
                f" {join(self.output, ERRORS_DIR)}/ and go on"
            )
            raise RecordError(msg)
        item: Dict[str, Any] = {"file": path, "line": line, "stage": b.stage, "error": b.error, "raw": b.raw}
        if members:
            item["members"] = members
        if tb:
            item["traceback"] = tb
        self.items.append(item)

    def _bad_unit(self, b: BadRecord) -> None:
        """A unit that could not be read to its end (a cut or corrupt compressed stream)."""
        if self.policy is OnError.RAISE:
            fix = b.fix or (
                "re-fetch or recompress the file (check it with gzip -t / zstd -t / xz -t / bzip2 -t)"
            )
            raise RecordError(
                f"{self.path}: {b.error}; the records after line {b.line} are missing."
                f" fix: {fix},"
                f" or rerun with --on_error skip to keep the {b.line} lines read, record the unit in"
                f" {join(self.output, ERRORS_DIR)}/ and count its lost bytes against --max_error_rate"
            )
        lost = self.reader.lost_bytes
        self.items.append(
            {
                "file": self.path,
                "line": b.line,
                "stage": "unit",
                "error": b.error,
                "raw": "",
                "lost_bytes": lost,
            }
        )

    @property
    def count(self) -> int:
        return len(self.items)

    def commit(self, unit_name: str) -> Optional[str]:
        if not self.items:
            return None
        rel = error_part(unit_name)
        self.file = write_summed(self.output, rel, b"".join(orjson.dumps(i) + b"\n" for i in self.items))
        return join(self.output, rel)


def _dump(rec: Any) -> str:
    """The record as our JSON Lines writes it (exact: big integers, typed values as tags); else its
    ``repr``, which shows what JSON cannot hold (NaN and infinity would become ``null`` there)."""
    try:
        return dumps(rec).decode()
    except (TypeError, ValueError):
        return repr(rec)[:2000]
