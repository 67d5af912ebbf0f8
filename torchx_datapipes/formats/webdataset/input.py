"""WebDataset tar shards (``.tar``, ``.tar.gz``, ``.tgz``; ``--format webdataset``): a shard is a unit.

One record per sample, ``{"__key__": key, "<field>": value, ...}``, grouped as the
``webdataset`` package groups them (``tariterators.base_plus_ext``/``group_by_keys``): the key
is the member path up to the first dot of its basename, the extension is the rest, its case kept
(``webdataset`` lower-cases it, but our writer writes field names as member suffixes, so
``Action``/``idNum`` must come back as written, as ``OutputDataset`` reads them; a third-party
``.JPG`` is the field ``JPG``; which decoder applies is decided case-insensitively);
consecutive members with the same key form one sample; non-regular members and
``__meta__``-style names are skipped (symlink and hardlink members are counted as
``skipped_members`` in the manifest and logged). Members are decoded by the codec our WebDataset
output and ``OutputDataset`` share (formats/webdataset/codec.py), so a shard of ours reads back as it was
written: ``.npy`` as a tensor and ``.json`` as its value (the field named without those
extensions), ``.txt``/``.text`` as str, ``.cls``/``.id``/``.index`` as int, anything else
(``.jpg``, ``.wav``, ...) as bytes. A sample with the same field twice is a bad record. A member
over the record bound (``--max_record_mb``) is not extracted: its sample is a bad record.
The location of a record (``line`` in errors) is the sample's number in the shard, 1-based; its
member names are the error's ``members`` (and are in the raise message).
"""

import re
import sys
import tarfile
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from torchx_datapipes.formats.base import Batches, InputFormat, open_unit_stream, too_large
from torchx_datapipes.formats.webdataset.codec import decode, kind, member_field
from torchx_datapipes.io.streams import CorruptError, TruncatedError

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState

_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")


def split_name(name: str) -> Tuple[Optional[str], Optional[str]]:
    m = _KEY.match(name)
    return (m.group(1), m.group(2)) if m else (None, None)


class WebDatasetFormat(InputFormat):
    name = "webdataset"
    extensions = (".tar", ".tgz")
    strict_unchanged = True

    def __init__(self) -> None:
        # the member names of each sample read so far (sample n at n - 1), so that an error names them
        self._members: List[str] = []

    def members(self, reader: "ReadState", line: int) -> Optional[str]:
        return self._members[line - 1] if 1 <= line <= len(self._members) else None

    def read(self, reader: "ReadState") -> Batches:
        u = reader.unit
        recs: List[Any] = []
        rows: List[int] = []
        sample: Optional[Dict[str, Any]] = None
        members: List[str] = []
        bad: Optional[str] = None
        links: List[str] = []  # symlink and hardlink members: skipped, counted and logged
        n = 0

        def flush() -> None:
            nonlocal sample, bad, n
            if sample is not None:
                n += 1
                self._members.append(", ".join(members))
                if bad:
                    reader.add_bad(n, bad, ", ".join(members))
                else:
                    recs.append(sample)
                    rows.append(n)
            sample, bad = None, None
            members.clear()

        with open_unit_stream(u.path, u.size) as (fh, raw):
            try:
                with tarfile.open(fileobj=fh, mode="r|*") as tar:
                    for info in tar:
                        if info.issym() or info.islnk():
                            links.append(info.name)
                            continue
                        if not info.isreg() or _META.match(info.name):
                            continue
                        key, ext = split_name(info.name)
                        if key is None or ext is None:
                            continue
                        over: Optional[str] = None
                        if info.size > reader.max_record:  # not extracted: the stream skips past it
                            data = b""
                            over = too_large(f"the member {info.name!r}", info.size, reader.max_record)
                        else:
                            data = tar.extractfile(info).read()  # type: ignore[union-attr]
                        if sample is None or key != sample["__key__"]:
                            flush()
                            if len(recs) >= reader.batch_size:
                                yield recs, rows
                                recs, rows = [], []
                            sample = {"__key__": key}
                        field = member_field(ext)
                        if field in sample and bad is None:
                            bad = f"sample {key!r} has the member {info.name!r} twice (field {field!r})"
                        if over is not None and bad is None:
                            bad = over
                        if bad is None:
                            try:
                                sample[field] = decode(ext, data)
                            except (ValueError, UnicodeDecodeError) as e:
                                bad = f"member {info.name!r} cannot be decoded as {kind(ext)}: {e}"
                        members.append(info.name)
                        reader.bytes_done = raw.consumed
                    flush()
            except (TruncatedError, CorruptError, tarfile.ReadError, EOFError) as e:
                reader.cut(TruncatedError(str(e)) if not isinstance(e, CorruptError) else e, n, raw.consumed)
            reader.bytes_read = raw.consumed
        reader.bytes_done = u.nbytes
        if links:
            reader.skipped_members += len(links)
            shown = ", ".join(repr(x) for x in links[:5]) + (
                f" and {len(links) - 5} more" if len(links) > 5 else ""
            )
            print(
                f"{u.path}: skipped {len(links)} link member(s) (symlink or hardlink: a sample is made of"
                f" regular files only; counted as skipped_members in the manifest): {shown}",
                file=sys.stderr,
                flush=True,
            )
        if recs:
            yield recs, rows
