"""JSON objects that repeat a key: the repeats renamed like pandas renames CSV headers, never lost.

orjson (like Python's json and JavaScript's ``JSON.parse``) keeps the last value of a repeated
key, silently losing the others. A record ``{"x": 1, "x": 2}`` is read as ``{"x": 1, "x.1": 2}``
instead (``formats/columns.py`` ``dedup``, the names CSV and Parquet headers get), at every
level of nesting; the reader warns, naming the file, line and keys, and counts them
(``renamed_keys`` in the manifest). Finding one costs almost nothing for the usual record: a
key is followed by ``":``, so a record with no more of them than the keys orjson returned has
no repeat; a nested record is compared with orjson's own encoding of it, and only a record with
more key colons than that is parsed again with the stdlib parser, which sees every pair.
"""

import json
import re
from typing import Any, Dict, List, Tuple

import orjson

from torchx_datapipes.formats.columns import dedup

_KEY_COLON = re.compile(rb'"\s*:')


def _count_keys(value: Any) -> int:
    if value.__class__ is dict:
        return len(value) + sum(_count_keys(v) for v in value.values())
    if value.__class__ is list:
        return sum(_count_keys(v) for v in value)
    return 0


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


Renamed = List[Tuple[str, str]]  # (key in the file, key given)


def _renaming(found: Renamed) -> Any:
    def hook(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) == len(keys):
            return dict(pairs)
        names = dedup(keys)
        found.extend((a, b) for a, b in zip(keys, names) if a != b)
        return dict(zip(names, (v for _, v in pairs)))

    return hook


def renamed(raw: bytes) -> Tuple[Any, Renamed]:
    """``raw`` parsed with every repeated key of its objects renamed (``x``, ``x.1``) and the
    renames; ``(None, [])`` when the stdlib parser cannot read it (orjson's reading stands)."""
    found: Renamed = []
    try:
        return json.loads(raw, object_pairs_hook=_renaming(found)), found
    except (ValueError, RecursionError):
        return None, []
