"""Per-field flags derived from a ``stats.json`` field entry: ``constant`` and ``id-like``.

- ``constant``: at least two present values and a single distinct one (numbers with
  min == max, a single string, all-true or all-false booleans, a single date or timestamp).
- ``id-like``: every value (nearly) distinct, so a domain or a distribution of it means nothing:
  strings whose distinct count is at least :data:`ID_LIKE_RATIO` of their count, or integers that
  are a permutation of a consecutive range (span + 1 = count and the std of a uniform range),
  the usual shape of row ids; integers with gaps are id-like too while the quantile sketch is
  exact (up to ~1,000 values per field: it then holds every value, see ``StatsPartial.result``);
  beyond that, numbers carry no distinct count and only consecutive ranges are detected.
  Fields with fewer than :data:`ID_LIKE_MIN_COUNT` values are never id-like.
"""

from __future__ import annotations

import math
from typing import Any

ID_LIKE_RATIO = 0.95
ID_LIKE_MIN_COUNT = 20


def field_flags(f: dict[str, Any]) -> list[str]:
    """The flags of one field entry of ``stats.json`` (``fields[name]``)."""
    out = []
    if is_constant(f):
        out.append("constant")
    if is_id_like(f):
        out.append("id-like")
    return out


def _kinds(f: dict[str, Any]) -> set[str]:
    return {k for k in f.get("types", {}) if k != "null"}


def is_constant(f: dict[str, Any]) -> bool:
    kinds = _kinds(f)
    if f.get("count", 0) < 2 or len(kinds) != 1:
        return False
    kind = next(iter(kinds))
    if kind in ("int", "float", "decimal"):
        num = f.get("numeric") or {}
        specials = num.get("pos_inf", 0) + num.get("neg_inf", 0)
        return not specials and num.get("min") is not None and num.get("min") == num.get("max")
    if kind == "string":
        d = (f.get("string") or {}).get("distinct") or {}
        return bool(d.get("exact")) and d.get("value") == 1
    if kind == "bool":
        b = f.get("bool") or {}
        return not b.get("true") or not b.get("false")
    if kind in ("date", "datetime"):
        t = f.get(kind) or {}
        return t.get("min") is not None and t.get("min") == t.get("max")
    return False


def is_id_like(f: dict[str, Any]) -> bool:
    kinds = _kinds(f)
    count = int(f.get("count", 0))
    if count < ID_LIKE_MIN_COUNT or len(kinds) != 1:
        return False
    kind = next(iter(kinds))
    if kind == "string":
        d = (f.get("string") or {}).get("distinct") or {}
        return float(d.get("value") or 0) >= ID_LIKE_RATIO * count
    if kind == "int":
        return _consecutive_ints(f.get("numeric") or {}, count)
    return False


def _consecutive_ints(num: dict[str, Any], count: int) -> bool:
    lo, hi, std = num.get("min"), num.get("max"), num.get("std_pop")
    if lo is None or hi is None or std is None or num.get("finite") != count:
        return False
    span = hi - lo + 1
    if span != count:
        return False
    uniform = math.sqrt((span * span - 1) / 12)  # the std of every permutation of a range
    return abs(std - uniform) <= 1e-6 * max(uniform, 1.0)
