"""JSON Lines output: a record per line, encoded by formats/jsonl/codec.py (what it refuses and why)."""

from typing import Any, Iterable, List, Optional

from torchx_datapipes.formats.jsonl.codec import dumps, encode_checked
from torchx_datapipes.formats.writer import BasePart, Failures

__all__ = ["JsonlPart", "dumps", "encode_checked"]


class JsonlPart(BasePart):
    ext = "jsonl"
    records_types = True

    def write_encoded(
        self, lines: List[bytes], records: Optional[List[Any]] = None, skip: Iterable[int] = ()
    ) -> None:
        """Append records already encoded as JSON: ``records`` are the records they encode, with those
        at the indexes in ``skip`` left out of ``lines`` (without them the part's field types are
        unknown)."""
        if self.types is not None:
            if records is None:
                self.types.forget()
            else:
                self.types.observe(records, skip)
        if lines:
            self.fh.write(b"\n".join(lines) + b"\n")
            self.records += len(lines)
            self.offered += len(lines)

    def _write(self, recs: List[Any]) -> Failures:
        ok, bad = encode_checked(recs)
        if ok:
            self.fh.write(b"\n".join(ok) + b"\n")
        return bad
