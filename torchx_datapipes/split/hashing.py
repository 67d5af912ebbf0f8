"""Stable 64-bit record hashes and hash-based split assignment.

A record's split under ``method=hash`` is a pure function of (canonical key bytes, seed,
fractions), so it cannot depend on world size, workers, input order or file boundaries, and
appending data never moves an existing record. Python's ``hash()`` is never used: it is salted
per process (PYTHONHASHSEED) and differs between 32/64-bit builds.

Canonical bytes are ``orjson.dumps(value, option=OPT_SORT_KEYS | OPT_SERIALIZE_NUMPY)``: ``1``,
``1.0`` and ``"1"`` hash differently, dict key order does not matter, and numpy scalars hash like
the Python numbers they print as. The hash is ``xxh3_64(canonical, seed)`` (XXH3 output is frozen
since xxHash 0.8.0). Both choices are part of the on-disk compatibility contract: changing either
would move records between splits of an existing dataset.

Typed values that orjson cannot write (``bytes``, ``Decimal``, torch tensors, numpy arrays that are
not C-contiguous) go through :func:`_typed_default`, which orjson calls only for values it would
otherwise reject, so the canonical bytes of every record that was hashable before are unchanged:
bytes become ``{"$bytes": hex}``, a ``Decimal`` ``{"$decimal": str}``, arrays and tensors their nested
lists (like orjson's own numpy output).
"""

from __future__ import annotations

import decimal
import operator
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import orjson
import xxhash

from torchx_datapipes.errors import InputError
from torchx_datapipes.split.fractions import UNIT_BITS, Fractions

__all__ = ["KeySpec", "MissingKeyError", "assign_hash", "canonical", "hash_keys", "parse_key", "to_unit"]

KEY_FORMAT = "FIELD[,FIELD...] naming top-level record fields, e.g. user_id or user_id,session"
_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
_SHIFT = np.uint64(64 - UNIT_BITS)
_MAX_SEED = (1 << 64) - 1
_repr = reprlib.Repr()  # keyword arguments need Python 3.12
_repr.maxstring, _repr.maxother, _repr.maxlevel, _repr.maxdict, _repr.maxlist = 120, 120, 3, 8, 8


class MissingKeyError(InputError):
    """A record lacks the key (or stratify) field, or is not a JSON object when a field is needed.

    ``index`` is the record's position in the batch; the runner adds file and line.
    """

    def __init__(self, index: int, field: str, record: Any) -> None:
        self.index, self.field, self.record = index, field, record
        if isinstance(record, Mapping):
            what = f"has no field {field!r} (fields: {_repr.repr(sorted(map(str, record)))})"
        else:
            what = f"is a {type(record).__name__}, not a JSON object, so it has no field {field!r}"
        super().__init__(
            f"record {index} of the batch {what}: {_repr.repr(record)}. Fix the field name, or make the"
            f" transform emit {field!r} on every record (or drop records without it)."
        )

    def __reduce__(self) -> tuple[type, tuple[int, str, Any]]:
        return (type(self), (self.index, self.field, self.record))


@dataclass(frozen=True)
class KeySpec:
    """The record fields whose values identify a group that must stay in one split."""

    fields: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.fields or any(not isinstance(f, str) or not f for f in self.fields):
            raise ValueError(f"invalid key fields {self.fields!r}: expected {KEY_FORMAT}")
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(
                f"invalid key fields {self.fields!r}: a field is repeated. Expected {KEY_FORMAT}"
            )

    def __str__(self) -> str:
        return ",".join(self.fields)


def parse_key(text: str | None) -> KeySpec | None:
    """Parse ``user_id,session`` into a :class:`KeySpec`; ``None`` or ``""`` means "whole record"."""
    if text is None or not text.strip():
        return None
    fields = tuple(f.strip() for f in text.split(","))
    if any(not f for f in fields) or len(set(fields)) != len(fields):
        raise ValueError(f"invalid key {text!r} (parsed as {list(fields)}): expected {KEY_FORMAT}")
    return KeySpec(fields)


def _typed_default(value: Any) -> Any:
    """orjson ``default``: a JSON form for typed values it cannot write (see the module docstring)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if any(c.__name__ == "Tensor" and c.__module__.split(".")[0] == "torch" for c in type(value).__mro__):
        t = value.detach().cpu()
        return (t if not t.is_floating_point() else t.double()).tolist()
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """The canonical bytes that are hashed for a key value (or a whole record)."""
    return orjson.dumps(value, default=_typed_default, option=_OPTS)


def hash_keys(records: Sequence[Any], key: KeySpec | None, seed: int) -> np.ndarray:
    """Stable 64-bit hashes (uint64) of each record's key, or of the whole record if ``key`` is None.

    A one-field key hashes the field's value; a multi-field key hashes the JSON array of values.

    Raises:
        MissingKeyError: a record lacks a key field or is not a dict.
        TypeError: a key value is not JSON-serialisable.
    """
    seed = check_seed(seed)
    h, dumps, opts, dflt = xxhash.xxh3_64_intdigest, orjson.dumps, _OPTS, _typed_default
    try:
        if key is None:
            out = [h(dumps(r, default=dflt, option=opts), seed) for r in records]
        elif len(key.fields) == 1:
            field = key.fields[0]
            out = [h(dumps(r[field], default=dflt, option=opts), seed) for r in records]
        else:  # itemgetter of several fields returns a tuple, which orjson writes as a JSON array
            get: Callable[[Any], Any] = operator.itemgetter(*key.fields)
            out = [h(dumps(get(r), default=dflt, option=opts), seed) for r in records]
    except (KeyError, TypeError, IndexError) as e:
        raise _explain(records, key, e) from e
    return np.array(out, dtype=np.uint64) if out else np.empty(0, dtype=np.uint64)


def to_unit(hashes: np.ndarray) -> np.ndarray:
    """The top 53 bits of each hash (uint64 in ``[0, 2**53)``): the hash as a point of ``[0, 1)``."""
    if not isinstance(hashes, np.ndarray) or hashes.dtype != np.uint64:
        raise TypeError(
            f"expected a numpy uint64 array of hashes (from hash_keys), got {type(hashes).__name__}"
            f" of dtype {getattr(hashes, 'dtype', None)}; pass hash_keys(...) output unchanged"
        )
    return hashes >> _SHIFT


def assign_hash(hashes: np.ndarray, fractions: Fractions) -> np.ndarray:
    """Split id of each hash: its 53-bit point of [0, 1) against the cumulative fractions."""
    split = np.searchsorted(fractions.boundaries, to_unit(hashes), side="right")
    return split.astype(fractions.split_dtype)


def check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= _MAX_SEED:
        raise ValueError(f"invalid seed {seed!r}: expected an integer in [0, 2**64 - 1], e.g. --seed 0")
    return int(seed)


def _explain(records: Sequence[Any], key: KeySpec | None, error: Exception) -> Exception:
    """Turn a failure inside the fast path into an error that names the record and the fix."""
    for i, record in enumerate(records):
        if key is not None:
            for field in key.fields:
                if not isinstance(record, Mapping) or field not in record:
                    return MissingKeyError(i, field, record)
        value = record if key is None else [record[f] for f in key.fields]
        try:
            canonical(value)
        except TypeError as e:
            what = "record" if key is None else f"key {str(key)!r} of the record"
            return TypeError(
                f"cannot hash the {what} at index {i} of the batch ({e}): {_repr.repr(record)}."
                " Keys must be JSON values (str, int, float, bool, None, list, dict with str keys),"
                " dates/datetimes, bytes, Decimal, numpy arrays or torch tensors; convert other types"
                " (sets, custom objects, ...) in the transform."
            )
    return error
