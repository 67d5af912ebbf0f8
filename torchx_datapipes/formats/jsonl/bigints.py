"""Integers beyond 64 bits, kept exact on the way in and out of JSON.

orjson (3.x, as installed) parses an integer literal outside [-2**63, 2**64) as a float
(``123456789012345678901234567890`` becomes ``1.2345678901234568e+29``) and refuses to
serialise one. We look for a run of 19+ digits, once per read chunk and then per line, and
only such lines go through the stdlib parser, which keeps integers exact; on the way out a
record orjson refuses for that reason is written by the stdlib encoder.
"""

import json
from typing import Any, FrozenSet, Optional, Set

import orjson

from torchx_datapipes.errors import DatapipesError

# 19 digits reach 2**63; anything shorter fits in int64, so orjson is exact for it. A regex
# (\d{19}) scans at ~100 MB/s; mapping every digit to "0" and searching for 19 zeros at ~450.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"0" * 9)
_RUN = b"0" * 19


def may_hold_big_int(buf: bytes) -> bool:
    """Whether ``buf`` has a run of 19 or more digits (then a line of it may hold a big integer)."""
    return buf.translate(_DIGITS_TO_ZERO).find(_RUN) >= 0


_ZERO = ord("0")
_NOT_BEFORE = frozenset(b".")  # a run after a point is a fraction's digits
_NOT_AFTER = frozenset(b".eE")  # a run before a point or an exponent is a float's mantissa


def big_int_lines(buf: bytes, first: int) -> FrozenSet[int]:
    """The numbers of the lines of ``buf`` (its first line is ``first``) that may hold an integer
    literal of 19+ digits: a run of digits that is neither a fraction's (after ``.``) nor a float
    mantissa's (before ``.``, ``e``, ``E``). Floats written with 17 significant digits, such as
    ``0.00012345678901234567``, hold such runs on most lines of real data; only integers need the
    exact parser. A run inside a string is kept too (parsing that line exactly changes nothing).
    One translation of the buffer, then one step per run; the lines are counted between runs.
    """
    t = buf.translate(_DIGITS_TO_ZERO)
    pos = t.find(_RUN)
    if pos < 0:
        return frozenset()
    out: Set[int] = set()
    line, counted, n = first, 0, len(t)
    while pos >= 0:
        start = pos
        while start > 0 and t[start - 1] == _ZERO:
            start -= 1
        end = pos + len(_RUN)
        while end < n and t[end] == _ZERO:
            end += 1
        if not (start > 0 and t[start - 1] in _NOT_BEFORE) and not (end < n and t[end] in _NOT_AFTER):
            line += t.count(b"\n", counted, start)
            counted = start
            out.add(line)
        pos = t.find(_RUN, end)
    return frozenset(out)


_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
_OUT_OF_RANGE = "Integer exceeds 64-bit range"


class TooDeep(DatapipesError, ValueError):
    """A record nested deeper than the exact parser (the stdlib's, recursive) can go."""


def loads_exact(raw: bytes) -> Any:
    """Re-parse a line orjson accepted and that may hold big integers: same value, exact integers.

    The stdlib parser recurses per nesting level; a record nested deeper than the interpreter's
    recursion limit allows is refused with :class:`TooDeep` (a ``ValueError``, so a bad record).
    """
    try:
        return json.loads(raw)
    except RecursionError:
        depth = _depth(raw)
        raise TooDeep(
            f"the record nests {depth} levels deep and holds a run of 19+ digits (an integer beyond 64 bits"
            " is kept exact by Python's json parser, which cannot go that deep); flatten the record, or"
            " write such integers as strings"
        ) from None


def dumps(rec: Any) -> bytes:
    """orjson's encoding; for a record with an integer beyond 64 bits, the stdlib's, exact."""
    try:
        return orjson.dumps(rec, option=_DUMP_OPTS)
    except TypeError as e:
        if _OUT_OF_RANGE not in str(e):
            raise
    try:
        text = json.dumps(rec, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default)
    except (TypeError, ValueError, RecursionError) as e:
        try:
            field = find_big_int(rec)
        except RecursionError:
            field = "<nested too deep to name>"
        raise TypeError(
            f"field {field}: an integer beyond 64 bits next to a value the exact encoder cannot write"
            f" ({e}); convert that field to str"
        ) from e
    return text.encode()


def _depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` outside strings (for the error message)."""
    depth = deepest = 0
    in_str = escaped = False
    for c in raw.decode("utf-8", errors="replace"):
        if in_str:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def _default(o: Any) -> Any:
    """numpy values and the like, through orjson, for the stdlib encoder."""
    try:
        return orjson.loads(orjson.dumps(o, option=_DUMP_OPTS))
    except TypeError:
        raise TypeError(f"Type is not JSON serializable: {type(o).__name__}") from None


def find_big_int(rec: Any, path: str = "") -> Optional[str]:
    """The path (``a.b[2]``) of the first integer outside int64 in ``rec``, or None."""
    if isinstance(rec, bool):
        return None
    if isinstance(rec, int):
        return (path or "<record>") if not -(2**63) <= rec < 2**63 else None
    if isinstance(rec, dict):
        for k, v in rec.items():
            found = find_big_int(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(rec, (list, tuple)):
        for i, v in enumerate(rec):
            found = find_big_int(v, f"{path}[{i}]")
            if found:
                return found
    return None
