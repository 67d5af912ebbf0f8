"""WebDataset members: one naming and value codec for the writer, the reader and ``--input``.

A record field becomes the member ``<key>.<field>[.<ext>]`` by its value, and a member's suffix
says how to decode it, so that what is written is read back with the same value and type:

==========================================  ======================  ==========================
value                                       member                  read back as
==========================================  ======================  ==========================
``bytes``                                   ``<key>.<field>``       ``bytes`` (``.npy``,
                                                                    ``.json``, ``.txt``... names
                                                                    excepted: see below)
numpy array / torch tensor                  ``<key>.<field>.npy``   a tensor, dtype and shape kept
``str`` in a ``txt``/``text`` field         ``<key>.<field>``       ``str`` (UTF-8 text)
``int`` in a ``cls``/``cls2``/``index``/    ``<key>.<field>``       ``int`` (decimal text)
``inx``/``id`` field
anything else (``None``, ``"007"`` in       ``<key>.<field>.json``  the JSON value: exact big
``id``, ``5`` in ``txt``, floats incl.                              integers, NaN and infinity;
NaN/inf, lists, ``Decimal``, dates,                                 ``Decimal``, ``date``,
times, nested arrays)                                               ``datetime`` (tz kept),
                                                                    ``time`` and nested arrays
                                                                    (tensors) from the tagged
                                                                    objects of formats/jsonl/codec.py
==========================================  ======================  ==========================

A field whose name already ends in ``npy``/``json`` (lower case) is not given the extension twice;
field names keep their case both ways (``Action`` is the member ``<key>.Action.json``). The text
conventions are WebDataset's (``.txt`` is text, ``.cls`` a class index); a value of another type
in such a field goes to ``.json`` rather than changing type on the way back (``"007"`` would read
back as 7 from ``.id``). ``None`` is the member ``<key>.<field>.json`` holding ``null`` (a tar
member costs 1 KiB at least, so a None costs that too): our readers give it back as ``None``, not
as a missing field. (The ``webdataset`` package's default decoder leaves it ``b"null"``: a
handler returning None means "not decoded" there.)
"""

import io
import json
from typing import Any, Tuple

import numpy as np

from torchx_datapipes.formats.jsonl import codec as jsoncodec
from torchx_datapipes.formats.jsonl.codec import dumps
from torchx_datapipes.formats.jsonl.finite import NonFiniteError
from torchx_datapipes.io.values import as_array

TEXT_EXTS = frozenset({"txt", "text"})
INT_EXTS = frozenset({"cls", "cls2", "index", "inx", "id"})
_BYTES = (bytes, bytearray, memoryview)


def kind(suffix: str) -> str:
    """How a member ``<key>.<suffix>`` decodes: ``npy``, ``json``, ``text``, ``int`` or ``bytes``."""
    last = suffix.rsplit(".", 1)[-1].lower()
    if last in ("npy", "json"):
        return last
    if last in TEXT_EXTS:
        return "text"
    return "int" if last in INT_EXTS else "bytes"


def member_field(suffix: str) -> str:
    """The record field a member ``<key>.<suffix>`` holds (the writer's ``.npy``/``.json`` dropped).

    The value extension is recognised in any case, as :func:`kind` decodes it (a third-party
    ``meta.JSON`` is the field ``meta``, as the ``webdataset`` package names it); every other
    part of the suffix keeps its case, so a field ``Action`` reads back as ``Action``.
    """
    head, dot, last = suffix.rpartition(".")
    return head if dot and last.lower() in ("npy", "json") else suffix


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _json(v: Any) -> bytes:
    """JSON as the JSON Lines writer encodes it, but NaN and infinity kept as Python's tokens."""
    try:
        return dumps(v)
    except NonFiniteError:
        jsoncodec.check_reserved(v)
        return json.dumps(_plain(v), allow_nan=True, ensure_ascii=False, separators=(",", ":")).encode()


def _plain(v: Any) -> Any:
    """``v`` as Python values the stdlib encoder takes, floats kept (NaN stays NaN); arrays, tensors,
    ``Decimal`` and dates as the JSON Lines writer's tagged objects (formats/jsonl/codec.py)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) or v is None or isinstance(v, (str, int, bool)):
        return v
    return _plain(jsoncodec.encode_value(v))


def member(key: str, field: str, v: Any) -> Tuple[str, bytes]:
    """The member name and bytes of one field value."""
    # the value extension is not added twice only when the field already ends in it as written
    # (``x.npy``); ``x.NPY`` gets ``.npy`` too, so that it reads back as ``x.NPY``, not as ``x``
    exact = field.rsplit(".", 1)[-1]
    last = exact.lower()
    if isinstance(v, _BYTES):
        if kind(field) != "bytes":
            raise ValueError(
                f"bytes in a field named {field!r} would be read back as {kind(field)}, not bytes:"
                " rename the field (e.g. by its file extension, such as 'png' or 'bin')"
            )
        return f"{key}.{field}", bytes(v)
    arr = as_array(v)
    if arr is not None:
        if arr.dtype.hasobject:
            raise TypeError(f"an array of dtype {arr.dtype} cannot be written as .npy without pickle")
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, allow_pickle=False)
        return (f"{key}.{field}" if exact == "npy" else f"{key}.{field}.npy"), buf.getvalue()
    if last in TEXT_EXTS and isinstance(v, str):
        return f"{key}.{field}", v.encode()
    if last in INT_EXTS and _is_int(v):
        return f"{key}.{field}", str(int(v)).encode()
    return (f"{key}.{field}" if exact == "json" else f"{key}.{field}.json"), _json(v)


def decode(suffix: str, data: bytes) -> Any:
    """A member's value from its bytes; ``.npy`` as a torch tensor (a numpy array if torch has no dtype)."""
    k = kind(suffix)
    if k == "npy":
        import torch  # lazily: only shards with arrays need it

        arr = np.load(io.BytesIO(data), allow_pickle=False)
        try:
            return torch.from_numpy(arr)
        except TypeError:  # a dtype torch has no tensor for (e.g. strings)
            return arr
    if k == "json":
        return jsoncodec.loads(data)
    if k == "text":
        return data.decode()
    if k == "int":
        return decode_int(data)
    return data


def decode_int(data: bytes) -> Any:
    """A class-index member: an int, or its text when it is not one (a shard written by others)."""
    text = data.decode()
    try:
        return int(text)
    except ValueError:
        return text
