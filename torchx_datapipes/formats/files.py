"""Files as records: images, audio, arrays, any binary blob (``--format files``).

One record per file, ``{"path": <url>, "bytes": <raw bytes>, "size": <n>}``, the bytes as
they are (nothing is decompressed or decoded). Units are groups of consecutive files (in the
sorted input order) of up to ``--unit_mb`` bytes and :data:`MAX_FILES_PER_UNIT` files each (a
file larger than ``--unit_mb`` is a unit alone; the last eighth of the files in units a quarter
that size), so they depend on the input alone. A record's
location is its position in the unit's group (1-based); :meth:`FilesFormat.location` turns it
into the file itself, so errors name that file (``file``, with ``line`` 1), never the unit's
first file.
"""

from typing import TYPE_CHECKING, Any, List, Sequence, Tuple

import fsspec

from torchx_datapipes.formats.base import (
    Batches,
    InputFormat,
    PlannedFile,
    ReadOptions,
    check_unchanged,
    too_large,
)
from torchx_datapipes.formats.format import Format
from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io.fs import is_plain_local

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState

MEDIA = (
    ".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".ico", ".heic", ".avif",
    ".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac",
    ".mp4", ".webm", ".mkv", ".avi", ".mov",
    ".npy", ".npz", ".pt", ".pth", ".safetensors", ".pdf", ".bin",
)  # fmt: skip


# At most this many files per unit, whatever --unit_mb allows: decoding costs far more per byte
# than parsing JSON (a 40 KB JPEG: ~3 ms), so 64 MB of images is ~5 s of one core, and issue 10's
# 10,000 JPEGs made only 7 units for 2 workers (4 and 3: the job waits for the fourth); now 40.
MAX_FILES_PER_UNIT = 256
# The last eighth of the files goes in units a quarter that size (files and bytes): workers claim
# units as they finish, so the job ends when the last unit does, and a short last unit makes
# the workers finish together (issue 10's images: the two slots ended 0.4 s apart with 256-file
# tail units). A function of the input alone, like the rest of the plan.
TAIL_FRACTION, TAIL_SHRINK = 8, 4


class FilesFormat(InputFormat):
    name = "files"
    extensions = MEDIA

    def plan(self, files: Sequence[PlannedFile], target: int, opts: ReadOptions) -> List[Unit]:
        groups: List[List[PlannedFile]] = []
        total = 0
        tail = len(files) - len(files) // TAIL_FRACTION
        for i, f in enumerate(files):
            cap, limit = (
                (MAX_FILES_PER_UNIT, target)
                if i < tail
                else (MAX_FILES_PER_UNIT // TAIL_SHRINK, target / TAIL_SHRINK)
            )
            if not groups or len(groups[-1]) >= cap or total + f[1] > limit:
                groups.append([])
                total = 0
            groups[-1].append(f)
            total += f[1]
        return [
            Unit(
                0, g[0][0], sum(s for _, s, _ in g), format=self.name, mtime=g[0][2],
                read={"files": [[p, s, m] for p, s, m in g]},
            )
            for g in groups
        ]  # fmt: skip

    def check_unchanged(self, unit: Unit) -> None:
        for path, size, mtime in self._files(unit):
            check_unchanged(path, size, mtime, strict=True)

    @staticmethod
    def _files(unit: Unit) -> List[Any]:
        return list((unit.read or {}).get("files") or [[unit.path, unit.size, unit.mtime]])

    def location(self, reader: "ReadState", line: int) -> Tuple[str, int]:
        files = self._files(reader.unit)
        return (str(files[line - 1][0]), 1) if 1 <= line <= len(files) else (reader.unit.path, line)

    def read(self, reader: "ReadState") -> Batches:
        recs: List[Any] = []
        rows: List[int] = []
        done = 0
        for i, (path, size, _) in enumerate(self._files(reader.unit), 1):
            if size > reader.max_record:  # not read at all: memory stays bounded by the record bound
                done += size
                reader.bytes_done = reader.bytes_read = done
                reader.add_bad(i, too_large("the file", size, reader.max_record), path)
                continue
            with open(path, "rb") if is_plain_local(path) else fsspec.open(path, "rb") as fh:
                data = fh.read(size)  # no byte past the planned size
            done += len(data)
            reader.bytes_done = reader.bytes_read = done
            recs.append({"path": path, "bytes": data, "size": len(data)})
            rows.append(i)
            if len(recs) >= reader.batch_size:
                yield recs, rows
                recs, rows = [], []
        if recs:
            yield recs, rows


FORMAT = Format("files", input=FilesFormat, doc="one record per file: image, audio or any bytes")
