"""WebDataset output: one tar shard per part, members ``<key>.<field>[.<ext>]`` (WebDataset naming).

Fields become members by the one codec readers share (formats/webdataset/codec.py): bytes as they are, arrays
and tensors as ``.npy``, str in ``txt``/``text`` fields and ints in ``cls``/``id``/... fields as
text, anything else as ``.json`` (``None`` too, as ``null``); each reads back with its value and type.

The key is the record's ``__key__`` if it has one, else ``<part>_<record index>``. A key's last
path component must not contain a dot (WebDataset splits member names at the first dot); a key may
hold directories (``train/img001``) but must be a safe relative path: an absolute key, a ``..``
component or a NUL is a bad record, since ``tarfile.extractall`` and ``tar -x`` would write the
member outside the target directory (Python < 3.14 extracts without a filter by default). Members
are written with mtime 0, so a shard's bytes depend on its records alone.

At commit the part's offset index (every member's suffix, data offset and size, see
``formats/webdataset/tarindex.py``) is written atomically beside it, ``_index/part-NNNNN.tar.idx``, and listed
with the part in the unit's ``files``: readers use it instead of scanning the tar's headers.
"""

from typing import Any, List, Optional, Tuple

from torchx_datapipes.formats.webdataset.codec import member
from torchx_datapipes.formats.webdataset.tarindex import IndexBuilder
from torchx_datapipes.formats.webdataset.tarstream import TarStream
from torchx_datapipes.formats.writer import BasePart, Failures
from torchx_datapipes.io.checksum import FileSum, sum_bytes, write_file
from torchx_datapipes.io.layout import tar_index_file


def _members(key: str, rec: Any) -> List[Tuple[str, bytes]]:
    if not isinstance(rec, dict):
        raise TypeError(f"WebDataset output needs dict records (field -> value), got {type(rec).__name__}")
    out: List[Tuple[str, bytes]] = []
    for field, v in rec.items():
        f = str(field)
        if f.startswith("__") and f.endswith("__"):
            continue  # __key__, __url__, ...: WebDataset metadata, not members
        if "/" in f or not f:
            raise ValueError(f"field {f!r}: a WebDataset member name cannot be empty or contain '/'")
        try:
            out.append(member(key, f, v))
        except (TypeError, ValueError) as e:
            raise type(e)(f"field {f}: {e}") from e
    return out


def _check_path(key: str) -> None:
    """Refuse a key that would extract outside the target directory (or not at all, with a NUL)."""
    parts = key.split("/")
    why = (
        "it contains a NUL character" if "\0" in key
        else "it is an absolute path" if key.startswith("/")
        else "it has a '..' path component" if ".." in parts
        else ""
    )  # fmt: skip
    if why:
        safe = "/".join(p for p in key.replace("\0", "").split("/") if p not in ("", ".", "..")) or "sample"
        raise ValueError(
            f"__key__ {key!r} is not a safe tar member name: {why}, so tarfile.extractall or tar -x would"
            f" write it outside the target directory; use a relative key of plain names, e.g. {safe!r}"
        )


class WebDatasetPart(BasePart):
    ext = "tar"
    records_types = True

    def __init__(self, url: str, key_prefix: Optional[str] = None) -> None:
        super().__init__(url, key_prefix)
        self.tar = TarStream(self.fh)  # tarfile's bytes, without its per-member cost (tarstream.py)
        self.index = IndexBuilder()
        self.index_sum: Optional[Tuple[int, str]] = None  # (size, checksum) once committed

    def _key(self, i: int, rec: Any) -> str:
        key = rec.get("__key__") if isinstance(rec, dict) else None
        if key is None:
            return f"{self.key_prefix}_{self.offered + i:06d}"
        key = str(key)
        _check_path(key)
        if not key or "." in key.rsplit("/", 1)[-1]:
            raise ValueError(
                f"__key__ {key!r} contains a '.' (or is empty); WebDataset splits member names at"
                " the first dot: use a key without dots"
            )
        return key

    def _write(self, recs: List[Any]) -> Failures:
        bad: Failures = []
        for i, rec in enumerate(recs):
            try:
                key = self._key(i, rec)
                members = _members(key, rec)
            except (TypeError, ValueError) as e:
                bad.append((i, f"output record cannot be written as WebDataset: {e}"))
                continue
            located = [(name[len(key) + 1 :], *self.tar.add(name, data)) for name, data in members]
            self.index.add(key, located)
        return bad

    def _finish(self) -> None:
        self.tar.close()

    def commit(self) -> None:
        super().commit()
        data = self.index.encode(self.fh.size)
        write_file(tar_index_file(self.url), data)  # atomic; the unit's record lists it after
        self.index_sum = (len(data), sum_bytes(data))

    def file_sums(self, rel: str) -> List[FileSum]:
        if self.index_sum is None:
            raise RuntimeError(f"{self.url} is not committed")
        size, digest = self.index_sum
        return [*super().file_sums(rel), FileSum(tar_index_file(rel), size, digest)]

    def abort(self) -> None:
        super().abort()  # the part is thrown away: no end of archive is written
