"""JSON objects that repeat a key: a bad record naming the key, never a silently lost value.

orjson (like Python's json and JavaScript's ``JSON.parse``) keeps the last value of a repeated
key and gives no access to the pairs, so there is nothing to rename like CSV headers: a record
``{"x": 1, "x": 2}`` is refused as a bad record naming the key. Finding one costs almost
nothing for the usual record: a key is followed by ``":``, so a record with no more of them
than the keys orjson returned has no duplicate; a nested record is compared with orjson's own
encoding of it, and only a record with more key colons than that (a repeated key) is parsed
again with the stdlib parser, which sees every pair and names the key.
"""

import json
import re
from typing import Any, Dict, List, Optional, Set, Tuple

import orjson

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
    """Whether ``raw`` (parsed by orjson as ``parsed``) may hold an object with a repeated key.

    A key ends with ``":`` (or ``" :``); inside a string a quote is escaped (``\\":``), and orjson
    escapes it the same way, so ``raw`` repeats a key only if it has more key colons than
    orjson's own encoding of what it parsed (a colon inside a value counts in both)."""
    flat = len(parsed) if parsed.__class__ is dict else 0
    keys = raw.count(b'":')
    if b'" :' in raw or b'"\t:' in raw:
        keys = len(_KEY_COLON.findall(raw))
    if keys <= flat:
        return False  # the usual flat record: no more key colons than keys
    try:
        return keys > orjson.dumps(parsed).count(b'":')
    except TypeError:  # an integer beyond 64 bits (parsed exactly by the stdlib): count by walking
        return keys > _count_keys(parsed)


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
