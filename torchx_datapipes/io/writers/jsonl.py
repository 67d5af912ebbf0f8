"""JSON Lines output.

Arrays and tensors become (nested) lists: their dtype is lost, write Parquet or WebDataset to
keep it. ``Decimal`` is written as its string (exact), ``datetime``/``date`` as ISO 8601 strings
(orjson's RFC 3339), numpy scalars as numbers. ``bytes`` are refused, naming the field: JSON has
no bytes; write ``--output_format parquet`` or ``webdataset``, or base64-encode the field in your
function. Integers beyond 64 bits are written exactly (see io/bigints.py).
"""

import datetime
import decimal
from typing import Any, List, Tuple

import numpy as np
import orjson

from torchx_datapipes.io.bigints import dumps as exact_dumps
from torchx_datapipes.io.writers.base import BasePart, Failures
from torchx_datapipes.io.writers.values import as_array, find_value, is_tensor

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


def _why(rec: Any, e: Exception) -> str:
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
        return orjson.dumps(rec, default=_default, option=_OPTS)
    except TypeError as e:
        if "Integer exceeds 64-bit range" not in str(e):
            raise
    return exact_dumps(rec)


def encode_checked(recs: List[Any]) -> Tuple[List[bytes], Failures]:
    """Encode records to JSON; return the encoded ones and ``(index, error)`` for the rest."""
    try:  # the hot path: orjson on the whole batch
        return [orjson.dumps(r, default=_default, option=_OPTS) for r in recs], []
    except TypeError:
        pass  # then record by record, with the exact encoder for integers beyond 64 bits
    ok: List[bytes] = []
    bad: Failures = []
    for i, r in enumerate(recs):
        try:
            ok.append(dumps(r))
        except (TypeError, ValueError) as e:
            bad.append((i, _why(r, e)))
    return ok, bad


class JsonlPart(BasePart):
    ext = "jsonl"

    def write_encoded(self, lines: List[bytes]) -> None:
        """Append records already encoded as JSON."""
        if lines:
            self.fh.write(b"\n".join(lines) + b"\n")
            self.records += len(lines)
            self.offered += len(lines)

    def _write(self, recs: List[Any]) -> Failures:
        ok, bad = encode_checked(recs)
        if ok:
            self.fh.write(b"\n".join(ok) + b"\n")
        return bad
