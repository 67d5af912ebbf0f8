"""The fast tar header scan agrees with tarfile (or hands over to it); .npy decodes like np.load."""

import io
import tarfile

import numpy as np
import pytest
import torch

from torchx_datapipes.formats.webdataset.decode import npy_tensor
from torchx_datapipes.formats.webdataset.reader import _tarfile_headers, scan_headers


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


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(24, dtype=np.int8).reshape(2, 3, 4),
        np.array(3.5, dtype=np.float16),
        np.zeros((0, 3), dtype=np.int64),
        np.array([True, False]),
        np.arange(6, dtype=">i4").reshape(2, 3),  # big-endian: np.load's semantics
        np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
        np.arange(5, dtype=np.uint16)[::2],
    ],
)
def test_npy_members_decode_like_np_load(arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    data = buf.getvalue()
    want = np.load(io.BytesIO(data), allow_pickle=False)
    if want.dtype.byteorder == ">":
        with pytest.raises((ValueError, TypeError)):
            torch.from_numpy(want)
        return
    for _ in range(2):  # the second decode uses the cached header
        got = npy_tensor(data)
        assert got.dtype == torch.from_numpy(want).dtype and tuple(got.shape) == want.shape
        assert np.array_equal(got.numpy(), want)
