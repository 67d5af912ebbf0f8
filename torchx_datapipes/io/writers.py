"""Part writers: write to a temporary name, rename into place on commit.

A reader that trusts only committed names never sees a half-written part.
"""

import os
from typing import Any, List, Optional, Tuple

import orjson

from torchx_datapipes.io.bigints import dumps as exact_dumps
from torchx_datapipes.io.checksum import FileSum, SummingFile, located
from torchx_datapipes.io.formats import extra_hint
from torchx_datapipes.io.fs import fs_and_path
from torchx_datapipes.io.layout import part_file, tmp_beside

_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
OUTPUT_FORMATS = ("jsonl", "parquet")


def dumps(rec: Any) -> bytes:
    """One record as JSON; integers beyond 64 bits are written exactly (see io/bigints.py)."""
    return exact_dumps(rec)


class PartWriter:
    """Writes one part file (JSON Lines or Parquet) atomically, counting and hashing its bytes.

    Any failure (a write, the close or the rename) removes the temporary file; an OSError such
    as ENOSPC names the part being written.
    """

    def __init__(self, url: str, fmt: str = "jsonl") -> None:
        if fmt not in OUTPUT_FORMATS:
            raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(OUTPUT_FORMATS)}")
        self.url, self.fmt = url, fmt
        self.fs, self.path = fs_and_path(url)
        parent = os.path.dirname(self.path)
        self.tmp = tmp_beside(self.path)
        try:
            self.fs.makedirs(parent, exist_ok=True)
            raw = self.fs.open(self.tmp, "wb")
        except OSError as e:
            raise located(e, url) from e
        self.fh = SummingFile(raw, url)
        self.records = 0
        self.committed = False
        self._pq: Any = None

    def write_encoded(self, lines: List[bytes]) -> None:
        """Append records already encoded as JSON (JSON Lines output only)."""
        if lines:
            self.fh.write(b"\n".join(lines) + b"\n")
            self.records += len(lines)

    def write(self, recs: List[Any]) -> None:
        if not recs:
            return
        if self.fmt == "jsonl":
            self.write_encoded([dumps(r) for r in recs])
            return
        self._write_parquet(recs)

    def _write_parquet(self, recs: List[Any]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as e:
            raise extra_hint("parquet", "pyarrow") from e
        table = pa.Table.from_pylist([r if isinstance(r, dict) else {"value": r} for r in recs])
        if self._pq is None:
            self._pq = pq.ParquetWriter(self.fh, table.schema)
        elif table.schema != self._pq.schema:
            table = table.cast(self._pq.schema)
        self._pq.write_table(table)
        self.records += len(recs)

    def commit(self) -> None:
        try:
            if self._pq is not None:
                self._pq.close()
            elif self.fmt == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq

                pq.write_table(pa.table({}), self.fh)
            self.fh.close()
            self.fs.mv(self.tmp, self.path)
        except OSError as e:
            self.abort()
            if self.url in str(e):
                raise
            raise located(e, self.url) from e
        except BaseException:
            self.abort()
            raise
        self.committed = True

    def file_sum(self, rel: str) -> FileSum:
        """The committed part's size and checksum, recorded under ``rel`` (relative to the output)."""
        if not self.committed:
            raise RuntimeError(f"{self.url} is not committed")
        return FileSum(rel, self.fh.size, self.fh.hexdigest())

    def abort(self) -> None:
        try:
            if not self.fh.closed:
                self.fh.close()
        except OSError:
            pass  # the part is being thrown away; the caller's error is the one to report
        finally:
            try:
                if self.fs.exists(self.tmp):
                    self.fs.rm(self.tmp)
            except OSError:
                pass


def encode_checked(recs: List[Any]) -> Tuple[List[bytes], List[Tuple[int, str]]]:
    """Encode records to JSON; return the encoded ones and ``(index, error)`` for the rest."""
    try:  # the hot path: orjson on the whole batch
        return [orjson.dumps(r, option=_DUMP_OPTS) for r in recs], []
    except TypeError:
        pass  # then record by record, with the exact encoder for integers beyond 64 bits
    ok: List[bytes] = []
    bad: List[Tuple[int, str]] = []
    for i, r in enumerate(recs):
        try:
            ok.append(dumps(r))
        except TypeError as e:
            bad.append((i, f"output record is not JSON-serializable: {e}"))
    return ok, bad


def part_name(index: int, fmt: str, prefix: Optional[str] = None) -> str:
    ext = "jsonl" if fmt == "jsonl" else "parquet"
    name = part_file(index, ext)
    return f"{prefix}/{name}" if prefix else name
