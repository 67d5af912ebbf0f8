"""JSON objects that repeat a key: a bad record naming the key, never a silently lost value.

orjson (like Python's json and JavaScript's ``JSON.parse``) keeps the last value of a repeated
key and gives no access to the pairs, so there is nothing to rename like CSV headers: a record
``{"x": 1, "x": 2}`` is refused as a bad record naming the key. Finding one costs almost
nothing for the usual record: a key is followed by a colon, so a record with no more colons
than the keys orjson returned has no duplicate; only a record with more (colons inside string
values, or a duplicate) is parsed again with the stdlib parser, which sees every pair.
"""

import json
import re
from typing import Any, Dict, List, Optional, Set, Tuple

_KEY_COLON = re.compile(rb'"\s*:')


class DuplicateKey(ValueError):
    """A JSON object that holds the same key twice (a bad record)."""


def _count_keys(value: Any) -> int:
    if value.__class__ is dict:
        return len(value) + sum(_count_keys(v) for v in value.values())
    if value.__class__ is list:
        return sum(_count_keys(v) for v in value)
    return 0


class _Seen(dict):  # type: ignore[type-arg]
    """An object of the stdlib parse with the keys it repeats."""

    repeated: Tuple[str, ...] = ()


def _pairs(pairs: List[Tuple[str, Any]]) -> Any:
    out = _Seen(pairs)
    if len(out) < len(pairs):
        seen: Set[str] = set()
        again: List[str] = []
        for k, _ in pairs:
            if k in seen and k not in again:
                again.append(k)
            seen.add(k)
        out.repeated = tuple(again)
    return out


def _repeated(value: Any, path: str = "") -> Optional[str]:
    """The first repeated key in ``value`` (a stdlib parse with :func:`_pairs`), as a path."""
    if isinstance(value, _Seen):
        if value.repeated:
            return path + value.repeated[0]
        for k, v in value.items():
            found = _repeated(v, f"{path}{k}.")
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _repeated(v, f"{path}{i}.")
            if found:
                return found
    return None


def may_repeat(raw: bytes, parsed: Any) -> bool:
    """Whether ``raw`` (parsed by orjson as ``parsed``) may hold an object with a repeated key."""
    flat = len(parsed) if parsed.__class__ is dict else 0
    if raw.count(b":") <= flat:
        return False  # the usual flat record: no more colons than keys
    keys = len(_KEY_COLON.findall(raw))  # a colon inside a string value rarely follows a quote
    return keys > flat and keys > _count_keys(parsed)


def repeated_key(raw: bytes) -> Optional[str]:
    """The first repeated key of ``raw`` (``a.b`` inside nested objects), or None."""
    try:
        return _repeated(json.loads(raw, object_pairs_hook=_pairs))
    except (ValueError, RecursionError):
        return None  # orjson accepted it; the stdlib cannot say: keep orjson's reading


def check(raw: bytes, parsed: Any) -> None:
    """Raise :class:`DuplicateKey` when ``raw`` repeats a key in an object."""
    if may_repeat(raw, parsed):
        key = repeated_key(raw)
        if key is not None:
            raise DuplicateKey(message(key))


def message(key: str) -> str:
    return (
        f"key {key!r} appears more than once in an object (a JSON parser keeps only the last value, so a"
        " value would be lost); fix the record so that each key appears once"
    )


def repeated_items(data: bytes, doc: Any) -> Dict[int, str]:
    """For a JSON document (``doc`` as orjson parsed it): ``{item index (0-based): repeated key}``."""
    if not may_repeat(data, doc):
        return {}
    try:
        doc = json.loads(data, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):
        return {}
    parsed = doc if isinstance(doc, list) else [doc]
    out = {}
    for i, item in enumerate(parsed):
        key = _repeated(item)
        if key is not None:
            out[i] = key
    return out
