"""JSON Lines output: a record per line, encoded by formats/jsonl/codec.py (what it refuses and why)."""

from typing import Any, List

from torchx_datapipes.formats.jsonl.codec import dumps, encode_checked
from torchx_datapipes.formats.writer import BasePart, Failures

__all__ = ["JsonlPart", "dumps", "encode_checked"]


class JsonlPart(BasePart):
    ext = "jsonl"

    def write_encoded(self, lines: List[bytes]) -> None:
        """Append records already encoded as JSON."""
        if lines:
            self.fh.write(b"\n".join(lines) + b"\n")
            self.records += len(lines)
            self.offered += len(lines)

    def _write(self, recs: List[Any]) -> Failures:
        ok, bad = encode_checked(recs)
        if ok:
            self.fh.write(b"\n".join(ok) + b"\n")
        return bad
