"""JSON as our outputs hold it: one encoder for every writer, one decoder for every reader.

Writing (JSON Lines parts, WebDataset ``.json`` members):

- arrays and tensors become (nested) lists: their dtype is lost, write Parquet or WebDataset to
  keep it; ``Decimal`` is written as its string (exact), ``datetime``/``date`` as ISO 8601 strings
  (orjson's RFC 3339), numpy scalars as numbers;
- ``bytes`` are refused, naming the field: JSON has no bytes; write ``--output_format parquet`` or
  ``webdataset``, or base64-encode the field in your function;
- NaN and +-inf (floats, numpy scalars, arrays and tensors) are refused the same way: JSON has no
  such numbers and orjson would write them as ``null``, a silent change of value;
- integers beyond 64 bits are written exactly (see formats/jsonl/bigints.py).

Reading: integers beyond 64 bits are exact (orjson alone would read
``123456789012345678901234567890`` as a float), and ``NaN``/``Infinity`` tokens (which Python's
``json`` and the ``webdataset`` package write and read, and a WebDataset ``.json`` member of ours
may hold) read back as floats.
"""

import datetime
import decimal
import json
import math
from typing import Any, List, Tuple

import numpy as np
import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.jsonl.bigints import dumps as exact_dumps
from torchx_datapipes.formats.jsonl.bigints import may_hold_big_int
from torchx_datapipes.io.values import as_array, find_value, is_tensor

Failures = List[Tuple[int, str]]

_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
_BYTES = (bytes, bytearray, memoryview)


def _default(o: Any) -> Any:
    arr = as_array(o)
    if arr is not None:
        if arr.dtype.kind in "biufc" or arr.dtype.kind == "U":
            return arr.tolist()
        raise TypeError(f"an array of dtype {arr.dtype} is not JSON-serializable")
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, decimal.Decimal):
        return str(o)
    if isinstance(o, _BYTES):
        raise TypeError("bytes")
    raise TypeError(f"Type is not JSON serializable: {type(o).__name__}")


_NON_FINITE = "NaN/inf cannot be written as JSON Lines"


class NonFiniteError(DatapipesError, ValueError):
    """A NaN or infinite number in a record bound for JSON, which has no such numbers."""


def _non_finite(v: Any) -> bool:
    """A NaN or infinite float, numpy float scalar, or float/complex array or tensor holding one."""
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, np.generic):
        return v.dtype.kind in "fc" and not bool(np.isfinite(v))
    arr = as_array(v) if isinstance(v, np.ndarray) or is_tensor(v) else None
    return arr is not None and arr.dtype.kind in "fc" and not bool(np.isfinite(arr).all())


_SCALARS = frozenset({str, int, bool, type(None)})


def _may_hold_non_finite(rec: Any) -> bool:
    """False when ``rec`` surely holds no NaN/inf: a flat dict of finite floats and other scalars.

    A table with missing values has ``null`` on most lines: this keeps their check to one pass
    over the values (``v - v`` is 0.0 for a finite float, NaN for NaN and the infinities); anything
    nested, an array or a tensor gets the full search.
    """
    if rec.__class__ is not dict:
        return True
    for v in rec.values():
        c = v.__class__
        if c is float:
            if v - v != 0:
                return True
        elif c not in _SCALARS:
            return True
    return False


def _check_finite(rec: Any, line: bytes) -> None:
    """orjson writes NaN and inf as ``null``: a line holding ``null`` is searched for one."""
    if b"null" in line and _may_hold_non_finite(rec):
        field = find_value(rec, _non_finite)
        if field:
            raise NonFiniteError(
                f"field {field}: {_NON_FINITE} (JSON has no NaN or infinity; it would become null);"
                " write --output_format parquet or webdataset, which keep them, or replace them in your"
                " function (e.g. with None)"
            )


def _why(rec: Any, e: Exception) -> str:
    if _NON_FINITE in str(e):
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
    arr = as_array(v) if isinstance(v, np.ndarray) or is_tensor(v) else None
    return arr is not None and (arr.dtype.kind in "biufcU")


def dumps(rec: Any) -> bytes:
    """One record as JSON (tensors as lists, Decimal as str); integers beyond 64 bits stay exact."""
    try:
        line = orjson.dumps(rec, default=_default, option=_OPTS)
    except TypeError as e:
        if "Integer exceeds 64-bit range" not in str(e):
            raise
        line = exact_dumps(rec)
    _check_finite(rec, line)
    return line


def encode_checked(recs: List[Any]) -> Tuple[List[bytes], Failures]:
    """Encode records to JSON; return the encoded ones and ``(index, error)`` for the rest."""
    try:  # the hot path: orjson on the whole batch
        lines = [orjson.dumps(r, default=_default, option=_OPTS) for r in recs]
    except TypeError:
        pass  # then record by record, with the exact encoder for integers beyond 64 bits
    else:
        suspect = [i for i, line in enumerate(lines) if b"null" in line and _may_hold_non_finite(recs[i])]
        if not suspect:
            return lines, []
        kept: List[bytes] = []
        refused: Failures = []
        todo = set(suspect)
        for i, (r, line) in enumerate(zip(recs, lines)):
            try:
                if i in todo:
                    _check_finite(r, line)
                kept.append(line)
            except NonFiniteError as e:
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


def loads(data: bytes) -> Any:
    """One JSON document, exact integers of any size, NaN and infinity tokens allowed."""
    if may_hold_big_int(data):
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # NaN/Infinity tokens; a truly invalid document raises here too


def loads_lines(data: bytes) -> List[Any]:
    """Each line of ``data`` (JSON Lines); the big-integer scan runs once per block, then per line."""
    lines = data.splitlines()
    if not may_hold_big_int(data):
        try:
            return [orjson.loads(line) for line in lines]
        except orjson.JSONDecodeError:
            pass
    return [loads(line) for line in lines]
