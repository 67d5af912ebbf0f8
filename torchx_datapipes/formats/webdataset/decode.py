"""Decoded values without pyarrow: column chunks as records, WebDataset members as values."""

import io
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch

from torchx_datapipes.formats.jsonl import codec as jsoncodec
from torchx_datapipes.formats.webdataset import codec as wdscodec
from torchx_datapipes.formats.webdataset.codec import member_field

__all__ = ["MemberDecoder", "NpyDecoder", "member_decoder", "member_field", "member_value"]


_NPY_MAGIC = b"\x93NUMPY"
# the parsed header of each distinct .npy header seen: the members of one field share it
_NPY_HEADERS: Dict[bytes, Optional[Tuple[np.dtype, Tuple[int, ...], int, int]]] = {}


def _npy_header(data: bytes) -> Optional[Tuple[np.dtype, Tuple[int, ...], int, int]]:
    """``(dtype, shape, element count, data offset)`` of a C-order .npy of a plain dtype, else None."""
    if data[:6] != _NPY_MAGIC or len(data) < 10:
        return None
    major = data[6]
    start, hlen = (
        (10, int.from_bytes(data[8:10], "little"))
        if major == 1
        else (12, int.from_bytes(data[8:12], "little"))
    )
    raw = bytes(data[: start + hlen])
    if raw not in _NPY_HEADERS:
        parsed = None
        try:
            header = np.lib.format.read_array_header_1_0(io.BytesIO(raw[8:])) if major == 1 else None
        except ValueError:
            header = None
        if header is not None:
            shape, fortran, dtype = header
            if not fortran and not dtype.hasobject:
                parsed = (dtype, tuple(shape), int(np.prod(shape, dtype=np.int64)), len(raw))
        if len(_NPY_HEADERS) < 4096:
            _NPY_HEADERS[raw] = parsed
        return parsed
    return _NPY_HEADERS[raw]


def npy_tensor(data: bytes) -> torch.Tensor:
    """A .npy member as a tensor (``np.load`` semantics, no pickle), its header parsed once."""
    header = _npy_header(data)
    if header is None:
        return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
    dtype, shape, count, offset = header
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
    return torch.from_numpy(arr.copy())  # writable, and not a view of the tar's bytes


# ---- members decoded in place: (uint8 array of a piece, offset, size) -> value --------------
# The array is read for one piece of a part and owned by that read, so a tensor may be a view of
# it (writable, shared with no one); other values are copied out.

MemberDecoder = Callable[[np.ndarray, int, int], Any]
_U8 = np.dtype(np.uint8)
_NpyHeader = Tuple[bytes, np.dtype, Tuple[int, ...], int, int]  # header, dtype, shape, its length, data bytes


class NpyDecoder:
    """A member field's ``.npy`` decoder: its header is parsed once and then checked by a prefix compare.

    A member whose header differs is parsed again (and becomes the cached one); anything the fast
    path does not cover (non-native byte order, Fortran order, short data, .npy v2) goes through
    :func:`npy_tensor`, i.e. ``np.load``'s semantics.
    """

    def __init__(self) -> None:
        self.header: Optional[_NpyHeader] = None

    def __call__(self, arr: np.ndarray, off: int, size: int) -> Any:
        h = self.header
        if h is None or h[3] + h[4] > size or arr[off : off + h[3]].tobytes() != h[0]:
            h = self._parse(arr, off, size)
            if h is None:
                return npy_tensor(arr[off : off + size].tobytes())
        _, dtype, shape, hlen, nbytes = h
        a = arr[off + hlen : off + hlen + nbytes]
        if dtype != _U8:
            a = a.view(dtype)
            if not a.flags.aligned:
                a = a.copy()
        return torch.from_numpy(a.reshape(shape))

    def _parse(self, arr: np.ndarray, off: int, size: int) -> Optional[_NpyHeader]:
        parsed = _npy_header(arr[off : off + min(size, 1 << 16)].tobytes())
        if parsed is None:
            return None
        dtype, shape, count, hlen = parsed
        if not dtype.isnative or dtype.kind not in "biufc" or hlen + count * dtype.itemsize > size:
            return None
        try:
            torch.from_numpy(np.empty(0, dtype))
        except TypeError:  # a dtype torch has no tensor for
            return None
        self.header = (arr[off : off + hlen].tobytes(), dtype, shape, hlen, count * dtype.itemsize)
        return self.header


def _json_member(arr: np.ndarray, off: int, size: int) -> Any:
    return jsoncodec.loads(arr[off : off + size].tobytes())


def _text_member(arr: np.ndarray, off: int, size: int) -> Any:
    return arr[off : off + size].tobytes().decode()


def _int_member(arr: np.ndarray, off: int, size: int) -> Any:
    return wdscodec.decode_int(arr[off : off + size].tobytes())


def _bytes_member(arr: np.ndarray, off: int, size: int) -> Any:
    return arr[off : off + size].tobytes()


_DECODERS: Dict[str, MemberDecoder] = {
    "json": _json_member,
    "text": _text_member,
    "int": _int_member,
    "bytes": _bytes_member,
}


def member_decoder(suffix: str) -> MemberDecoder:
    """The in-place decoder of members ``<key>.<suffix>`` (same values as :func:`member_value`)."""
    k = wdscodec.kind(suffix)
    return NpyDecoder() if k == "npy" else _DECODERS[k]


def member_value(suffix: str, data: bytes) -> Any:
    """A member's value from its bytes, as formats/webdataset/codec.py decodes it (``.npy`` as a tensor)."""
    if wdscodec.kind(suffix) == "npy":
        return npy_tensor(data)
    return wdscodec.decode(suffix, data)
