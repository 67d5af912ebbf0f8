"""Tar members written straight to a file, with the exact bytes ``tarfile`` would write.

``tarfile.TarFile.addfile`` costs ~25 us a member (building the header in Python, the PAX checks,
a ``BytesIO`` copy), which is ~80 us a record for a WebDataset sample of three members: ~5% of a
1.6 ms image transform (issue 10's images benchmark). Here the header of an ordinary member (an
ASCII name of at most 100 bytes, a size below 8 GiB) is a copy of one template with its name,
size and checksum filled in (~2 us); every other member (long or non-ASCII names, huge sizes)
gets ``tarfile.TarInfo.tobuf(PAX_FORMAT)``, i.e. tarfile's own bytes. The archive ends as
``tarfile`` ends one (two zero blocks, then zeros up to a multiple of ``RECORDSIZE``), so a part
is byte-for-byte what ``tarfile.open(mode="w|", format=PAX_FORMAT)`` writes (tested).
"""

import tarfile
from typing import Any, Protocol, Tuple

BLOCK = tarfile.BLOCKSIZE
_MAX_SIZE = 8**11  # 11 octal digits
_MODE = 0o644


def _template() -> bytes:
    info = tarfile.TarInfo("")
    info.size, info.mtime, info.mode = 0, 0, _MODE
    buf = bytearray(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape"))
    assert len(buf) == BLOCK
    buf[148:156] = b" " * 8  # the checksum is computed with its own field as spaces
    return bytes(buf)


_TEMPLATE = _template()


def member_header(name: str, size: int) -> bytes:
    """The header block(s) ``tarfile`` writes for a regular file ``name`` of ``size`` bytes (mtime 0)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > 100 or not raw.isascii() or not 0 <= size < _MAX_SIZE or not raw:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, 0, _MODE
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    h = bytearray(_TEMPLATE)
    h[: len(raw)] = raw
    h[124:136] = b"%011o\0" % size
    h[148:155] = b"%06o\0" % sum(h)
    return bytes(h)


class Writable(Protocol):
    def write(self, data: bytes, /) -> Any: ...


class TarStream:
    """Appends members to ``fh`` and ends the archive; ``offset`` is the bytes written so far."""

    def __init__(self, fh: Writable) -> None:
        self.fh, self.offset = fh, 0

    def add(self, name: str, data: bytes) -> Tuple[int, int]:
        """Write one member; returns ``(offset of its data, size)``."""
        header = member_header(name, len(data))
        pad = -len(data) % BLOCK
        self.fh.write(header + data + b"\0" * pad if len(data) < (1 << 20) else header)
        if len(data) >= (1 << 20):  # a big member: no copy of it into one buffer
            self.fh.write(data)
            self.fh.write(b"\0" * pad)
        start = self.offset + len(header)
        self.offset = start + len(data) + pad
        return start, len(data)

    def close(self) -> None:
        """End of archive: two zero blocks, then zeros to a multiple of ``tarfile.RECORDSIZE``."""
        end = self.offset + 2 * BLOCK
        self.fh.write(b"\0" * (2 * BLOCK + -end % tarfile.RECORDSIZE))
        self.offset = end + -end % tarfile.RECORDSIZE
