"""The part file every writer writes: a temporary name, renamed into place on commit, hashed as written.

A reader that trusts only committed names never sees a half-written part. A writer's
``write(records)`` returns ``(index, message)`` for each record it could not serialize (the
caller maps the index to the input line and applies ``--on_error``); it never raises a bare
library error for a record.
"""

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from torchx_datapipes.formats.fieldtypes import FieldTypes, merge
from torchx_datapipes.io import blocksums
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import FileSum, SummingFile, located, sum_bytes, write_file
from torchx_datapipes.io.fs import fs_and_path
from torchx_datapipes.io.layout import block_sums_file, tmp_beside

Failures = List[Tuple[int, str]]


class BasePart:
    """One part file being written; subclasses implement :meth:`_write` and :meth:`_finish`."""

    ext = ""
    # formats without a schema of their own record each field's value types (formats/fieldtypes.py)
    records_types = False
    # "module:Class" of the part reader OutputDataset uses for this format (formats/chunks.py
    # ``PartFormat``); None: the outputs cannot be read back by OutputDataset
    reader: Optional[str] = None

    def __init__(self, url: str, key_prefix: Optional[str] = None) -> None:
        self.url = url
        self.fs, self.path = fs_and_path(url)
        self.key_prefix = key_prefix or os.path.basename(self.path).split(".", 1)[0]
        self.open_tmp()
        self.records = 0  # records written
        self.offered = 0  # records passed to write(), written or not (WebDataset keys count these)
        self.committed = False
        self.sums_sum: Optional[Tuple[int, str]] = None  # (size, checksum) of the block sums file
        self.schema: Optional[bytes] = None  # the part's Arrow schema, serialized (Parquet only)
        self.types: Optional[FieldTypes] = FieldTypes() if self.records_types else None

    @classmethod
    def finalize_job(
        cls, output: str, metas: List[Dict[str, Any]], meta_name: Callable[[Dict[str, Any]], str]
    ) -> Dict[str, Any]:
        """The format's job-level step at commit (rank 0, after every unit), e.g. Parquet's one
        schema for all parts; returns entries for the manifest. ``meta_name(meta)``: the name a
        unit's commit record is stored under. Default: the union of the parts' field types, if they
        were recorded and all known."""
        docs = [t for m in metas for t in (m.get(ms.FIELD_TYPES) or {}).values()]
        merged = merge(docs) if docs else None
        return {ms.FIELD_TYPES: merged} if merged is not None else {}

    def open_tmp(self) -> None:
        """Start (or start again) the temporary file the part is written to."""
        parent = os.path.dirname(self.path)
        self.tmp = tmp_beside(self.path)
        try:
            self.fs.makedirs(parent, exist_ok=True)
            raw = self.fs.open(self.tmp, "wb")
        except OSError as e:
            raise located(e, self.url) from e
        self.fh = SummingFile(raw, self.url)

    def write(self, recs: List[Any]) -> Failures:
        if not recs:
            return []
        bad = self._write(recs)
        self.offered += len(recs)
        self.records += len(recs) - len(bad)
        if self.types is not None:
            self.types.observe(recs, (i for i, _ in bad))
        return bad

    def _write(self, recs: List[Any]) -> Failures:
        raise NotImplementedError

    def _finish(self) -> None:
        """Write what is buffered and any footer to ``self.fh`` (before it is closed)."""

    def commit(self) -> None:
        try:
            self._finish()
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
        # the part's block checksums beside it (atomic; the unit's record lists it after)
        data = blocksums.encode(self.fh.size, self.fh.blocks.digests())
        write_file(block_sums_file(self.url), data)
        self.sums_sum = (len(data), sum_bytes(data))

    def commit_meta(self, rel: str) -> Dict[str, Any]:
        """What the unit's commit record keeps of this part under ``rel``: its Arrow schema (Parquet),
        or its fields' value types (formats without a schema)."""
        from torchx_datapipes.formats.commit import encode_schema

        meta: Dict[str, Any] = {}
        if self.schema is not None:
            meta[ms.SCHEMAS] = {rel: encode_schema(self.schema)}
        if self.types is not None:
            meta[ms.FIELD_TYPES] = {rel: self.types.to_json()}
        return meta

    def file_sum(self, rel: str) -> FileSum:
        """The committed part's size and checksum, recorded under ``rel`` (relative to the output)."""
        if not self.committed:
            raise RuntimeError(f"{self.url} is not committed")
        return FileSum(rel, self.fh.size, self.fh.hexdigest())

    def file_sums(self, rel: str) -> List[FileSum]:
        """Every file the committed part consists of: the part, its block sums, any other side file."""
        if self.sums_sum is None:
            raise RuntimeError(f"{self.url} is not committed")
        size, digest = self.sums_sum
        return [self.file_sum(rel), FileSum(block_sums_file(rel), size, digest)]

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
