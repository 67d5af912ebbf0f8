"""The stats job's configuration: a frozen dataclass parsed once from CLI strings.

Sketch sizes are chosen for the documented error targets (``docs/stats-schema.md``):
``kll_k=400`` gives a normalized rank error of 0.68% (< 1%) with 99% confidence, and
``hll_lg_k=14`` gives a relative standard error of 0.8%, so 3% is about 3.7 sigma.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

DEFAULT_QUANTILES: tuple[float, ...] = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)

_FIELDS_FORMAT = "a comma-separated list of top-level field names, e.g. 'x,y,label'"
_QUANTILES_FORMAT = "a comma-separated list of numbers in [0, 1], e.g. '0.01,0.5,0.99'"


@dataclass(frozen=True)
class StatsConfig:
    """What to compute, and how large the sketches are.

    Args:
        fields: top-level fields to profile; ``None`` profiles every field seen.
        quantiles: quantile ranks reported for numeric values, each in [0, 1].
        top_k: number of most frequent strings reported per field.
        bins: number of equal-width histogram bins per numeric field.
        kll_k: KLL sketch size (quantiles, histograms); larger is more accurate.
        hll_lg_k: log2 of the HyperLogLog register count (distinct counts).
        exact_distinct_limit: strings are counted exactly while a field has at most this
            many distinct values; beyond it, HLL and frequent-items sketches take over.
        frequent_lg_map_size: log2 of the frequent-items map; top-k counts stay exact while a
            field has fewer than 0.75 * 2**frequent_lg_map_size distinct values.
        discrete_limit: a numeric section whose finite values are all integers with at most this
            many distinct values (e.g. years, labels) also reports exact ``value_counts``, and the
            report draws one bar per value instead of an equal-width histogram.
    """

    fields: tuple[str, ...] | None = None
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    top_k: int = 20
    bins: int = 30
    kll_k: int = 400
    hll_lg_k: int = 14
    exact_distinct_limit: int = 1000
    frequent_lg_map_size: int = 13
    discrete_limit: int = 30

    def __post_init__(self) -> None:
        if self.fields is not None:
            _check_fields(self.fields)
        _check_quantiles(self.quantiles)
        _check_range("top_k", self.top_k, 1, 100_000)
        _check_range("bins", self.bins, 1, 10_000)
        _check_range("kll_k", self.kll_k, 8, 65_535)
        _check_range("hll_lg_k", self.hll_lg_k, 4, 21)
        _check_range("exact_distinct_limit", self.exact_distinct_limit, 0, 10_000_000)
        _check_range("frequent_lg_map_size", self.frequent_lg_map_size, 3, 24)
        _check_range("discrete_limit", self.discrete_limit, 0, 10_000)

    @staticmethod
    def parse(
        fields: str | None = None,
        quantiles: str | None = None,
        top_k: int = 20,
        bins: int = 30,
        **sizes: int,
    ) -> StatsConfig:
        """Build a config from CLI strings such as ``"x,y,label"`` and ``"0.01,0.5,0.99"``.

        Empty or ``None`` strings mean the defaults. ``sizes`` may set ``kll_k``, ``hll_lg_k``,
        ``exact_distinct_limit``, ``frequent_lg_map_size`` and ``discrete_limit``. Raises
        ``ValueError`` naming the bad value and the accepted format.
        """
        unknown = sorted(set(sizes) - _SIZE_NAMES)
        if unknown:
            raise ValueError(f"unknown stats option(s) {unknown}; accepted: {sorted(_SIZE_NAMES)}")
        return StatsConfig(
            fields=_parse_fields(fields),
            quantiles=_parse_quantiles(quantiles),
            top_k=top_k,
            bins=bins,
            **sizes,
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["fields"] = None if self.fields is None else list(self.fields)
        d["quantiles"] = list(self.quantiles)
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> StatsConfig:
        known = {f.name for f in dataclasses.fields(StatsConfig)}
        kw = {k: v for k, v in d.items() if k in known}
        if kw.get("fields") is not None:
            kw["fields"] = tuple(kw["fields"])
        kw["quantiles"] = tuple(kw.get("quantiles", DEFAULT_QUANTILES))
        return StatsConfig(**kw)


_SIZE_NAMES = {"kll_k", "hll_lg_k", "exact_distinct_limit", "frequent_lg_map_size", "discrete_limit"}


def _parse_fields(value: str | None) -> tuple[str, ...] | None:
    if value is None or not value.strip():
        return None
    parts = [p.strip() for p in value.split(",")]
    if any(not p for p in parts):
        raise ValueError(f"--fields {value!r} has an empty name; expected {_FIELDS_FORMAT}")
    return tuple(parts)


def _parse_quantiles(value: str | None) -> tuple[float, ...]:
    if value is None or not value.strip():
        return DEFAULT_QUANTILES
    out = []
    for part in value.split(","):
        try:
            out.append(float(part))
        except ValueError as e:
            raise ValueError(
                f"--quantiles {value!r}: {part.strip()!r} is not a number; expected {_QUANTILES_FORMAT}"
            ) from e
    return tuple(sorted(set(out)))


def _check_fields(fields: tuple[str, ...]) -> None:
    if not fields:
        raise ValueError(f"fields is empty; pass None for all fields or {_FIELDS_FORMAT}")
    for f in fields:
        if not isinstance(f, str) or not f:
            raise ValueError(f"field name {f!r} is not a non-empty string; expected {_FIELDS_FORMAT}")
    if len(set(fields)) != len(fields):
        raise ValueError(f"fields {list(fields)} has duplicates; list each field once")


def _check_quantiles(quantiles: tuple[float, ...]) -> None:
    if not quantiles:
        raise ValueError(f"quantiles is empty; expected {_QUANTILES_FORMAT}")
    for q in quantiles:
        if not isinstance(q, (int, float)) or isinstance(q, bool) or not (0.0 <= q <= 1.0) or math.isnan(q):
            raise ValueError(f"quantile {q!r} is outside [0, 1]; expected {_QUANTILES_FORMAT}")
    if list(quantiles) != sorted(set(quantiles)):
        raise ValueError(f"quantiles {list(quantiles)} must be strictly increasing, e.g. (0.01, 0.5, 0.99)")


def _check_range(name: str, value: int, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not (lo <= value <= hi):
        raise ValueError(f"{name}={value!r} is invalid; expected an integer in [{lo}, {hi}]")
