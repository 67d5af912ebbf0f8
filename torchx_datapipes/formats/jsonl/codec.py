"""JSON as our outputs hold it: one encoder for every writer, one decoder for every reader.

Writing (JSON Lines parts, WebDataset ``.json`` members, queue messages' JSON members):

- values JSON has no type for are written as **tagged objects**, which every reader of ours
  (``OutputDataset``, the next job's ``--input``, the queue consumer) turns back into the value::

    {"__tdp__": "tensor", "dtype": "int16", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]}
    {"__tdp__": "decimal", "value": "-1234.5670"}
    {"__tdp__": "date", "value": "2024-02-29"}
    {"__tdp__": "datetime", "value": "2024-02-29T13:14:15.123456+01:00", "tz": "Europe/Paris"}
    {"__tdp__": "time", "value": "13:14:15.123456"}

  A numpy array or torch tensor (any dtype numpy has, and bfloat16) keeps its dtype and shape;
  ``data`` is its values in row-major order. It reads back as a **torch tensor**, as from Parquet
  and WebDataset (a numpy array for a dtype torch has no tensor for, e.g. strings). ``Decimal``
  keeps its exact digits and exponent (``str``/``Decimal(str)``, NaN and infinities included).
  ``date``, ``datetime`` and ``time`` are ISO 8601 (``isoformat``/``fromisoformat``: microseconds
  and the UTC offset kept); a ``datetime`` whose tzinfo is a ``zoneinfo.ZoneInfo`` also carries
  its zone name (``"tz"``) and reads back in that zone; any other tzinfo reads back as its fixed
  UTC offset (``datetime.timezone``). Other readers see the tagged objects as plain objects.
- the key ``"__tdp__"`` is reserved: a record holding a dict with that key is refused, naming the
  field, as it would read back as something else. A reader decodes only an object of exactly a
  tag's keys, and looks for them only in a line holding the bytes ``"__tdp__"``;
- numpy scalars are written as numbers (``np.int8(3)`` reads back as ``3``);
- ``bytes`` are refused, naming the field: JSON has no bytes; write ``--output_format parquet`` or
  ``webdataset``, or base64-encode the field in your function;
- NaN and +-inf (floats, numpy scalars, arrays and tensors) are refused the same way: JSON has no
  such numbers and orjson would write them as ``null``, a silent change of value;
- integers beyond 64 bits are written exactly (see formats/jsonl/bigints.py).

Reading: integers beyond 64 bits are exact (orjson alone would read
``123456789012345678901234567890`` as a float), ``NaN``/``Infinity`` tokens (which Python's
``json`` and the ``webdataset`` package write and read, and a WebDataset ``.json`` member of ours
may hold) read back as floats, and tagged objects as their values (:func:`decode_tags`).
"""

import datetime
import decimal
import json
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import numpy as np
import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.jsonl.bigints import dumps as exact_dumps
from torchx_datapipes.formats.jsonl.bigints import may_hold_big_int
from torchx_datapipes.formats.jsonl.finite import (
    NON_FINITE,
    NonFiniteError,
    check_finite,
    may_hold_non_finite,
)
from torchx_datapipes.io.values import as_array, find_value, is_tensor

Failures = List[Tuple[int, str]]

# datetimes, dates and times reach _default (orjson would write them as plain strings); numpy
# arrays too (no OPT_SERIALIZE_NUMPY: orjson would write them as plain nested lists)
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
_BYTES = (bytes, bytearray, memoryview)

TAG = "__tdp__"
TAG_BYTES = b'"__tdp__"'  # in every line that holds a tagged object (or the reserved key)
_VALUE_KEYS = frozenset({TAG, "value"})
_TAG_KEYS: Dict[str, Tuple[FrozenSet[str], ...]] = {
    "tensor": (frozenset({TAG, "dtype", "shape", "data"}),),
    "decimal": (_VALUE_KEYS,),
    "date": (_VALUE_KEYS,),
    "datetime": (_VALUE_KEYS, frozenset({TAG, "value", "tz"})),
    "time": (_VALUE_KEYS,),
}


class ReservedKey(DatapipesError, ValueError):
    """A record holding a dict with the key ``"__tdp__"``, which tags our typed values in JSON."""


class BadTag(DatapipesError, ValueError):
    """A tagged object (``{"__tdp__": ...}`` of exactly a tag's keys) whose value does not decode."""


_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _tensor_tag(o: Any, fragment: bool = False) -> Dict[str, Any]:
    """An array or tensor as its tagged object: dtype, shape and row-major values.

    ``fragment``: ``data`` as JSON already written by orjson's numpy serializer (C speed; for
    orjson's ``default``). float16/float32 values are widened to float64 first and written as the
    float64 repr of their exact value, as ``tolist()`` gives them: a reader parses a float64 and
    casts it to the dtype, exact by construction. (Their shortest float32 decimals, about half the
    bytes, would be parsed as float64 and rounded a second time to float32, which is not proven
    exact.)
    """
    if is_tensor(o) and str(o.dtype) == "torch.bfloat16":  # numpy has no bfloat16; float32 holds it exactly
        t = o.detach().cpu()
        values = t.float().reshape(-1).tolist()
        return {TAG: "tensor", "dtype": "bfloat16", "shape": list(t.shape), "data": values}
    arr = as_array(o)
    assert arr is not None
    kind = arr.dtype.kind
    if kind in "biuf":
        dtype = arr.dtype.name
    elif kind == "U":
        dtype = arr.dtype.str
    else:
        raise TypeError(f"an array of dtype {arr.dtype} is not JSON-serializable")
    flat = arr.reshape(-1)
    data: Any
    if fragment and kind in "biuf":
        flat = np.ascontiguousarray(flat, dtype=np.float64 if kind == "f" else flat.dtype.newbyteorder("="))
        data = orjson.Fragment(orjson.dumps(flat, option=_NUMPY))
    else:
        data = flat.tolist()
    return {TAG: "tensor", "dtype": dtype, "shape": list(arr.shape), "data": data}


def _datetime_tag(o: datetime.datetime) -> Dict[str, Any]:
    tag = {TAG: "datetime", "value": o.isoformat()}
    key = getattr(o.tzinfo, "key", None)  # a zoneinfo.ZoneInfo's zone name
    if key is not None and o.tzinfo.__class__.__name__ == "ZoneInfo":
        tag["tz"] = key
    return tag


def encode_value(o: Any) -> Any:
    """A value JSON has no type for, as JSON can hold it: its tagged object (numpy scalars as numbers).

    Raises TypeError for what JSON cannot hold (bytes, objects of other types).
    """
    if isinstance(o, np.ndarray) or is_tensor(o):
        return _tensor_tag(o)
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, decimal.Decimal):
        return {TAG: "decimal", "value": str(o)}
    if isinstance(o, datetime.datetime):
        return _datetime_tag(o)
    if isinstance(o, datetime.date):
        return {TAG: "date", "value": o.isoformat()}
    if isinstance(o, datetime.time):
        return {TAG: "time", "value": o.isoformat()}
    if isinstance(o, _BYTES):
        raise TypeError("bytes")
    raise TypeError(f"Type is not JSON serializable: {type(o).__name__}")


def _default(o: Any) -> Any:
    """orjson's ``default``: :func:`encode_value`, tensors' values written by orjson itself."""
    if isinstance(o, np.ndarray) or is_tensor(o):
        return _tensor_tag(o, fragment=True)
    return encode_value(o)


def _to_plain(v: Any) -> Any:
    """``v`` with every value JSON has no type for replaced by its tagged object (for the stdlib encoder)."""
    if isinstance(v, dict):
        return {k: _to_plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_to_plain(x) for x in v]
    if v is None or isinstance(v, (str, int, float)):
        return v
    return encode_value(v)


def _holds_reserved(v: Any) -> bool:
    return isinstance(v, dict) and TAG in v


def check_reserved(rec: Any, line: Optional[bytes] = None) -> None:
    """Refuse a record holding a dict with the key ``"__tdp__"`` (``line``: its JSON, searched first)."""
    if line is not None and TAG_BYTES not in line:
        return
    field = find_value(rec, _holds_reserved)
    if field:
        raise ReservedKey(
            f"field {field}: a dict with the key {TAG!r}, which torchx_datapipes reserves to tag typed"
            " values (tensors, Decimal, dates) in JSON; it would read back as something else. Rename the key"
        )


def _tensor_value(d: Dict[str, Any]) -> Any:
    dtype, shape, data = d["dtype"], d["shape"], d["data"]
    if dtype.__class__ is not str or shape.__class__ is not list or data.__class__ is not list:
        raise ValueError("dtype must be a string, shape and data lists")
    if dtype == "bfloat16":
        import torch

        return torch.tensor(data, dtype=torch.float32).reshape(shape).to(torch.bfloat16)
    np_dtype = np.dtype(dtype)
    if np_dtype.kind not in "biufU":
        raise ValueError(f"dtype {dtype} is not one JSON can hold")
    arr = np.array(data, dtype=np_dtype).reshape(shape)
    if np_dtype.kind == "U":
        return arr
    import torch  # lazily: only tagged tensors need it

    try:
        return torch.from_numpy(arr)
    except TypeError:  # a dtype torch has no tensor for
        return arr


def _datetime_value(d: Dict[str, Any]) -> datetime.datetime:
    dt = datetime.datetime.fromisoformat(d["value"])
    tz = d.get("tz")
    if tz is None:
        return dt
    import zoneinfo

    if dt.tzinfo is None:
        raise ValueError("a zone name on a naive datetime")
    zone = zoneinfo.ZoneInfo(tz)
    wall = dt.replace(tzinfo=zone)
    for fold in (0, 1):  # the wall time and fold that had this offset (a repeated or skipped hour)
        candidate = wall.replace(fold=fold)
        if candidate.utcoffset() == dt.utcoffset():
            return candidate
    return dt.astimezone(zone)  # not written by us: the same instant in that zone


_DECODE = {
    "tensor": _tensor_value,
    "decimal": lambda d: decimal.Decimal(d["value"]),
    "date": lambda d: datetime.date.fromisoformat(d["value"]),
    "datetime": _datetime_value,
    "time": lambda d: datetime.time.fromisoformat(d["value"]),
}


def _untag(d: Dict[str, Any]) -> Any:
    """The value of a tagged object, or ``d`` itself if it is not exactly one."""
    kind = d[TAG]
    shapes = _TAG_KEYS.get(kind) if kind.__class__ is str else None
    if shapes is None or d.keys() not in shapes:
        return d
    if kind != "tensor" and d["value"].__class__ is not str:
        raise BadTag(f"a {TAG!r} tagged {kind} whose value is not a string: {str(d)[:200]}")
    try:
        return _DECODE[kind](d)
    except (TypeError, ValueError, KeyError, ArithmeticError, OverflowError, ImportError) as e:
        raise BadTag(f"a {TAG!r} tagged {kind} that does not decode ({e}): {str(d)[:200]}") from None


def decode_tags(v: Any) -> Any:
    """``v`` (as parsed from JSON) with each tagged object replaced by its value (in place for containers).

    Call it only for a document holding :data:`TAG_BYTES`; raises :class:`BadTag` for a tagged
    object of exactly a tag's keys that does not decode.
    """
    c = v.__class__
    if c is dict:
        if TAG in v:
            out = _untag(v)
            if out is not v:
                return out
        for k, x in v.items():
            if x.__class__ is dict or x.__class__ is list:
                v[k] = decode_tags(x)
    elif c is list:
        for i, x in enumerate(v):
            if x.__class__ is dict or x.__class__ is list:
                v[i] = decode_tags(x)
    return v


def _why(rec: Any, e: Exception) -> str:
    if isinstance(e, (NonFiniteError, ReservedKey)) or NON_FINITE in str(e):
        return str(e)
    field = find_value(rec, lambda v: isinstance(v, _BYTES))
    if field:
        return (
            f"field {field}: bytes cannot be written as JSON Lines; write --output_format parquet or"
            " webdataset, which keep bytes, or base64-encode the field in your function"
        )
    field = find_value(rec, lambda v: not _plain(v))
    where = f"field {field}: " if field else ""
    return f"output record is not JSON-serializable: {where}{e}"


def _plain(v: Any) -> bool:
    """Whether ``v`` is something the JSON encoder takes (containers are looked into by find_value)."""
    if v is None or isinstance(v, (str, int, float, bool, dict, list, tuple, np.generic)):
        return True
    if isinstance(v, (decimal.Decimal, datetime.date, datetime.time)):
        return True
    if is_tensor(v) and str(v.dtype) == "torch.bfloat16":
        return True
    arr = as_array(v) if isinstance(v, np.ndarray) or is_tensor(v) else None
    return arr is not None and (arr.dtype.kind in "biufU")


def dumps(rec: Any) -> bytes:
    """One record as JSON (typed values as tagged objects); integers beyond 64 bits stay exact."""
    try:
        line = orjson.dumps(rec, default=_default, option=_OPTS)
    except TypeError as e:
        if "Integer exceeds 64-bit range" not in str(e):
            raise
        line = exact_dumps(_to_plain(rec))
    check_finite(rec, line)
    check_reserved(rec, line)
    return line


def encode_checked(recs: List[Any]) -> Tuple[List[bytes], Failures]:
    """Encode records to JSON; return the encoded ones and ``(index, error)`` for the rest."""
    try:  # the hot path: orjson on the whole batch
        lines = [orjson.dumps(r, default=_default, option=_OPTS) for r in recs]
    except TypeError:
        pass  # then record by record, with the exact encoder for integers beyond 64 bits
    else:
        joined = b"".join(lines)  # one search of the batch; only a batch that holds either looks per line
        if b"null" not in joined and TAG_BYTES not in joined:
            return lines, []
        suspect = [
            i
            for i, line in enumerate(lines)
            if (b"null" in line and may_hold_non_finite(recs[i])) or TAG_BYTES in line
        ]
        if not suspect:
            return lines, []
        kept: List[bytes] = []
        refused: Failures = []
        todo = set(suspect)
        for i, (r, line) in enumerate(zip(recs, lines)):
            try:
                if i in todo:
                    check_finite(r, line)
                    check_reserved(r, line)
                kept.append(line)
            except (NonFiniteError, ReservedKey) as e:
                refused.append((i, str(e)))
        return kept, refused
    ok: List[bytes] = []
    bad: Failures = []
    for i, r in enumerate(recs):
        try:
            ok.append(dumps(r))
        except (TypeError, ValueError) as e:
            bad.append((i, _why(r, e)))
    return ok, bad


def _parse(data: bytes) -> Any:
    if may_hold_big_int(data):
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # NaN/Infinity tokens; a truly invalid document raises here too


def loads(data: bytes) -> Any:
    """One JSON document, exact integers of any size, NaN and infinity tokens allowed, tags decoded."""
    value = _parse(data)
    return decode_tags(value) if TAG_BYTES in data else value


def loads_lines(data: bytes) -> List[Any]:
    """Each line of ``data`` (JSON Lines); the big-integer and tag scans run once per block, then per line."""
    lines = data.splitlines()
    if not may_hold_big_int(data):
        try:
            recs = [orjson.loads(line) for line in lines]
        except orjson.JSONDecodeError:
            pass
        else:
            if TAG_BYTES not in data:
                return recs
            return [decode_tags(r) if TAG_BYTES in line else r for r, line in zip(recs, lines)]
    return [loads(line) for line in lines]
