"""Anomalies found while checking records: counts and example records per (field, kind).

Each unit of work fills one :class:`Found` and stores it as JSON beside its stats partial; the
job merges them in unit order, so the examples (up to :data:`MAX_EXAMPLES` per anomaly, the
first ones in input order) do not depend on ``-j``. :func:`to_list` turns the merged counts
into the ``anomalies.json`` entries.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

MAX_EXAMPLES = 5
MAX_VALUES = 100  # distinct unexpected values remembered per field (their counts are exact)
_VALUE_CHARS = 200


def show(value: Any) -> Any:
    """An example value as JSON: scalars as they are, anything else (or anything long) as short text."""
    if value is None or isinstance(value, (bool, int, float)):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1 << 63:
            return str(value)
        if isinstance(value, float) and value != value:
            return "NaN"
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return str(value)
        return value
    text = value if isinstance(value, str) else _repr(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 1] + "…"


def _repr(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        return f"{type(value).__name__}(dtype={value.dtype}, shape={list(shape)})"
    return repr(value)


class Found:
    """Mergeable anomaly counts: ``{(field, kind): {"count", "examples", "values"}}``."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}

    def add(
        self, field: str, kind: str, count: int, examples: list[dict[str, Any]], values: Any = None
    ) -> None:
        if count <= 0:
            return
        it = self.items.setdefault((field, kind), {"count": 0, "examples": [], "values": Counter()})
        it["count"] += count
        room = MAX_EXAMPLES - len(it["examples"])
        if room > 0:
            it["examples"] += examples[:room]
        if values:
            self._add_values(it["values"], values)

    @staticmethod
    def _add_values(into: Counter[str], values: Any) -> None:
        for v, n in Counter(values).items() if not isinstance(values, dict) else values.items():
            key = str(show(v))
            if key in into or len(into) < MAX_VALUES:
                into[key] += int(n)

    def merge(self, other: Found) -> None:
        for (field, kind), it in other.items.items():
            self.add(field, kind, it["count"], it["examples"], dict(it["values"]))

    def state(self) -> list[dict[str, Any]]:
        return [
            {
                "field": f,
                "kind": k,
                "count": it["count"],
                "examples": it["examples"],
                "values": dict(it["values"]),
            }
            for (f, k), it in self.items.items()
        ]

    @staticmethod
    def from_state(items: list[dict[str, Any]]) -> Found:
        found = Found()
        for it in items:
            found.add(it["field"], it["kind"], int(it["count"]), list(it["examples"]), it.get("values") or {})
        return found

    def count(self, field: str, kind: str) -> int:
        it = self.items.get((field, kind))
        return 0 if it is None else int(it["count"])

    def get(self, field: str, kind: str) -> dict[str, Any] | None:
        return self.items.get((field, kind))


def anomaly(
    field: str,
    kind: str,
    severity: str,
    description: str,
    examples: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One ``anomalies.json`` entry."""
    return {
        "field": field,
        "kind": kind,
        "severity": severity,
        "description": description,
        "examples": list(examples or [])[:MAX_EXAMPLES],
        **extra,
    }


SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def at_or_above(anomalies: list[dict[str, Any]], level: str) -> list[dict[str, Any]]:
    """The anomalies whose severity is at least ``level`` (``never``: none)."""
    if level == "never":
        return []
    floor = SEVERITY_RANK[level]
    return [a for a in anomalies if SEVERITY_RANK[a["severity"]] >= floor]
