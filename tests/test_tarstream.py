"""``formats/webdataset/tarstream.py`` writes the exact bytes ``tarfile`` (PAX format, stream mode) writes."""

import io
import tarfile
from typing import List, Tuple

import pytest

from torchx_datapipes.formats.webdataset.tarstream import TarStream, member_header

NAMES = [
    "a",
    "part-00001_000007.image.npy",
    "x" * 100,  # the longest plain ustar name
    "x" * 101,  # a PAX extended header
    "dir/sub/key_01.label.cls",
    "clé_01.txt",  # non-ASCII: PAX
    "k.\udcff.bin",  # surrogate-escaped bytes: PAX
]
SIZES = [0, 1, 511, 512, 513, 12345, 8**11 - 1, 8**11]


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", SIZES)
def test_header_bytes_equal_tarfiles(name: str, size: int) -> None:
    assert member_header(name, size) == _tarfile_header(name, size)


def _with_tarfile(members: List[Tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("count", [0, 1, 3, 40])
def test_an_archive_equals_tarfiles_and_offsets_point_at_the_data(count: int) -> None:
    members = [(NAMES[i % len(NAMES)] + f"{i}", bytes([i % 256]) * (i * 997 % 5000)) for i in range(count)]
    members.append(("big.bin", b"\x07" * ((1 << 20) + 3)))  # written without a joined copy
    buf = io.BytesIO()
    tar = TarStream(buf)
    located = [tar.add(name, data) for name, data in members]
    tar.close()
    got = buf.getvalue()
    assert got == _with_tarfile(members) and tar.offset == len(got)
    for (_, data), (start, size) in zip(members, located):
        assert got[start : start + size] == data
    with tarfile.open(fileobj=io.BytesIO(got)) as t:
        assert [(m.name, m.offset_data, m.size) for m in t] == [
            (n, s, z) for (n, _), (s, z) in zip(members, located)
        ]
