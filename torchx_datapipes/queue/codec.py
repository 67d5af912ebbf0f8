"""One queue message: a header and a batch of records, framed without pickle.

Every field of every record is one WebDataset member (``formats/webdataset/codec.py``): tensors and arrays
are ``.npy`` raw buffers (dtype and shape kept, read back as torch tensors), ``bytes`` stay raw
bytes, text and class fields stay text and ints, anything else is exact JSON (big integers,
NaN and infinity included). The framing is length-prefixed::

    b"TDPQ" version(u8) | header_len(u32) | header (JSON) | per record: n_fields(u32),
    then per field: name_len(u16) | name (UTF-8 member suffix) | data_len(u32) | data

A record whose fields are all flat JSON scalars that JSON keeps exactly (``str``, ``bool``,
``None``, ``int`` within 64 bits, finite ``float``) is framed as one JSON document instead
(``n_fields`` = ``0xFFFFFFFF``, then ``data_len(u32) | data``): the same values and types back,
at ~1 us a record instead of ~10 us of per-field members (version 2; version 1 messages, which
have no such records, still decode).

The header carries the message id ``(job, unit, seq)``, the record count and the kind
(``data`` or ``end``, the end marker with the job's total record count).
"""

import ast
import io
import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.webdataset.codec import decode, decode_int, kind, member, member_field
from torchx_datapipes.io.values import as_array

MAGIC = b"TDPQ"
VERSION = 2
_READS = (1, 2)
_JSON_RECORD = 0xFFFFFFFF
_SCALARS = frozenset({str, bool, type(None)})
_HEAD = struct.Struct("<4sBI")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_KEY = "r"


class MessageFormatError(DatapipesError, ValueError):
    """A message that is not a torchx_datapipes queue message (or of a newer version)."""


@dataclass(frozen=True)
class Header:
    kind: str  # "data" or "end"
    job: str
    unit: int = -1
    seq: int = 0
    records: int = 0  # records in this message; for "end": the job's total

    @property
    def id(self) -> str:
        """``job/unit/seq`` for data, ``job/end`` for the end marker: the dedup key."""
        return f"{self.job}/end" if self.kind == "end" else f"{self.job}/{self.unit}/{self.seq}"


_SUFFIXES: Dict[bytes, Tuple[str, str, str]] = {}  # member suffix -> (suffix, field, kind)
_NPY_HEADERS: Dict[Tuple[str, Tuple[int, ...]], bytes] = {}  # (dtype, shape) -> .npy header
_NPY_LAYOUTS: Dict[bytes, Tuple[np.dtype, Tuple[int, ...], bool]] = {}  # .npy header -> layout


def _npy(arr: np.ndarray) -> bytes:
    """``np.save``'s bytes (C order), with the header cached per dtype and shape: np.save is ~50x slower."""
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
        arr = arr.copy(order="C")
    key = (arr.dtype.str, arr.shape)
    head = _NPY_HEADERS.get(key)
    if head is None:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=False)
        full = buf.getvalue()
        head = _NPY_HEADERS[key] = full[: len(full) - arr.nbytes]
        return full
    return head + arr.tobytes()


def _from_npy(data: bytes) -> Any:
    """A ``.npy`` member as a torch tensor (falls back to the shared codec for what it does not handle)."""
    if data[:6] != b"\x93NUMPY" or data[6] not in (1, 2, 3):
        return decode("npy", data)
    hlen_size = 2 if data[6] == 1 else 4
    hlen = int.from_bytes(data[8 : 8 + hlen_size], "little")
    start = 8 + hlen_size + hlen
    head = data[:start]
    layout = _NPY_LAYOUTS.get(head)
    if layout is None:
        d = ast.literal_eval(head[8 + hlen_size :].decode("latin1"))
        dtype = np.dtype(d["descr"]) if isinstance(d["descr"], str) else None
        if dtype is None or dtype.hasobject or dtype.kind not in "biufc":
            return decode("npy", data)
        layout = _NPY_LAYOUTS[head] = (dtype, tuple(d["shape"]), bool(d["fortran_order"]))
    dtype, shape, fortran = layout
    arr = np.frombuffer(bytearray(data[start:]), dtype=dtype).reshape(shape, order="F" if fortran else "C")
    if not dtype.isnative:  # torch has no byte-swapped tensors: same values, native order
        arr = arr.astype(dtype.newbyteorder("="))
    import torch

    try:
        return torch.from_numpy(arr)
    except TypeError:
        return arr


def _json_exact(record: Dict[str, Any]) -> bool:
    """Whether JSON gives every field back with its value and type (flat scalars only)."""
    for k, v in record.items():
        if k.__class__ is not str:
            return False
        c = v.__class__
        if c is float:
            if v - v != 0:  # NaN or infinity: JSON has none
                return False
        elif c is int:
            if not -(2**63) <= v < 2**63:
                return False
        elif c not in _SCALARS:
            return False
    return True


def encode_record(record: Dict[str, Any]) -> bytes:
    """One record, framed: one JSON document when that is exact, else a member per field
    (the WebDataset member codec, ``formats/webdataset/codec.py``)."""
    if not isinstance(record, dict):
        raise TypeError(f"a queue record must be a dict of fields, got {type(record).__name__}")
    if _json_exact(record):
        doc = orjson.dumps(record)
        return b"".join((_U32.pack(_JSON_RECORD), _U32.pack(len(doc)), doc))
    parts = [_U32.pack(len(record))]
    for name, value in record.items():
        field = str(name)
        arr = None if isinstance(value, (bytes, bytearray, memoryview)) else as_array(value)
        if arr is not None and not arr.dtype.hasobject:
            suffix = (field if field.rsplit(".", 1)[-1].lower() == "npy" else f"{field}.npy").encode()
            data = _npy(arr)
        else:
            member_name, data = member(_KEY, field, value)
            suffix = member_name[len(_KEY) + 1 :].encode()
        parts += [_U16.pack(len(suffix)), suffix, _U32.pack(len(data)), data]
    return b"".join(parts)


def encode(header: Header, records: List[bytes]) -> bytes:
    """A message from a header and records already passed through :func:`encode_record`."""
    head = orjson.dumps(
        {"kind": header.kind, "job": header.job, "unit": header.unit, "seq": header.seq,
         "records": header.records}
    )  # fmt: skip
    return b"".join([_HEAD.pack(MAGIC, VERSION, len(head)), head, *records])


def decode_header(body: bytes) -> Tuple[Header, int]:
    """The header and the offset of the first record."""
    if len(body) < _HEAD.size:
        raise MessageFormatError(f"a queue message of {len(body)} bytes is too short for a header")
    magic, version, hlen = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise MessageFormatError(f"not a torchx_datapipes queue message (starts with {body[:8]!r})")
    if version not in _READS:
        raise MessageFormatError(f"queue message version {version}; this reader knows {_READS}: upgrade it")
    start = _HEAD.size
    h = orjson.loads(body[start : start + hlen])
    return Header(h["kind"], h["job"], int(h["unit"]), int(h["seq"]), int(h["records"])), start + hlen


def decode_records(body: bytes, offset: Optional[int] = None) -> List[Dict[str, Any]]:
    """Every record of a message, with their types (tensors as torch tensors)."""
    if offset is None:
        offset = decode_header(body)[1]
    view = memoryview(body)
    out: List[Dict[str, Any]] = []
    pos = offset
    while pos < len(body):
        (n,) = _U32.unpack_from(body, pos)
        pos += 4
        if n == _JSON_RECORD:
            (dl,) = _U32.unpack_from(body, pos)
            out.append(orjson.loads(view[pos + 4 : pos + 4 + dl]))
            pos += 4 + dl
            continue
        rec: Dict[str, Any] = {}
        for _ in range(n):
            (ln,) = _U16.unpack_from(body, pos)
            raw = body[pos + 2 : pos + 2 + ln]
            pos += 2 + ln
            (dl,) = _U32.unpack_from(body, pos)
            data = bytes(view[pos + 4 : pos + 4 + dl])
            pos += 4 + dl
            info = _SUFFIXES.get(raw)
            if info is None:
                suffix = raw.decode()
                info = _SUFFIXES[raw] = (suffix, member_field(suffix), kind(suffix))
            suffix, name, k = info
            if k == "npy":
                rec[name] = _from_npy(data)
            elif k == "int":
                rec[name] = decode_int(data)
            else:
                rec[name] = decode(suffix, data)
        out.append(rec)
    return out
