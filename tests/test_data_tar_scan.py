"""The fast tar header scan agrees with ``tarfile`` or hands over to it."""

import io
import tarfile

import pytest

from torchx_datapipes.data._tar import _tarfile_headers, scan_headers


def _tar(members: list, fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_scan_matches_tarfile(fmt: int) -> None:
    members = [("d", None), ("d/a.x", b""), ("d/a.y", b"1" * 511), ("b.npy", b"2" * 513)]
    members.append(("p" * 90 + "/" + "q" * 60 + ".bin", b"3" * 1024))  # ustar prefix field
    data = _tar(members, fmt)
    got = scan_headers(data)
    want = _tarfile_headers(io.BytesIO(data))
    assert got is None or got == want
    if fmt == tarfile.USTAR_FORMAT:
        assert got == want and [n for n, _, _ in got][-1].startswith("p" * 90 + "/")


def test_long_names_and_damage_go_to_tarfile() -> None:
    assert scan_headers(_tar([("n" * 150, b"x")], tarfile.PAX_FORMAT)) is None
    assert scan_headers(_tar([("n" * 150, b"x")], tarfile.GNU_FORMAT)) is None
    data = bytearray(_tar([("a.txt", b"hello")]))
    data[0] ^= 1  # the checksum no longer matches
    assert scan_headers(bytes(data)) is None
    assert scan_headers(_tar([("a.txt", b"hello")])[:600]) is None  # truncated member
