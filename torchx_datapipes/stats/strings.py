"""String accumulator: exact counts while small, HLL + frequent-items sketches beyond.

While a field has at most ``exact_distinct_limit`` distinct values we keep a plain
``{value: count}`` dict, so distinct counts and top-k are exact. Past the limit the dict is
replayed into an HLL sketch (distinct) and a frequent-items sketch (top-k with bounds) and
dropped; from then on each batch costs one sketch update per *distinct* value in the batch.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.moments import FloatArray, Moments

# HLL bounds at 2 standard deviations (~95%); see docs/stats-schema.md.
_HLL_STDDEVS = 2
# a field with at most this many distinct strings lists them all (``values``), as TFDV's
# max_string_domain_size: what a schema's domain and the categorical drift distances use
DOMAIN_LIMIT = 100


class StringAcc:
    """Distinct count, top-k values and length moments of string values."""

    def __init__(self, config: StatsConfig) -> None:
        self.config = config
        self.count = 0
        self.lengths = Moments()
        self.exact: dict[str, int] | None = {}
        self.hll: sketches.HllSketch | None = None
        self.freq: sketches.FreqSketch | None = None

    def update(self, values: list[str]) -> None:
        if not values:
            return
        lengths = np.fromiter(map(len, values), dtype=np.float64, count=len(values))
        self.update_counted(lengths, Counter(values))

    def update_counted(self, lengths: FloatArray, counts: dict[str, int]) -> None:
        """Add values given as their lengths (one per value) and their counts by distinct value."""
        if lengths.size == 0:
            return
        self.count += int(lengths.size)
        self.lengths.update(lengths)
        self._add_counts(counts)

    def _add_counts(self, counts: dict[str, int]) -> None:
        exact = self.exact
        if exact is not None:
            if len(exact) + len(counts.keys() - exact.keys()) > self.config.exact_distinct_limit:
                self._to_sketches()  # switch first: never grow the dict past the limit
            else:
                for value, c in counts.items():
                    exact[value] = exact.get(value, 0) + c
                return
        assert self.hll is not None and self.freq is not None
        # one sketch update per distinct value; deque(map(...)) drives the C++ calls without a
        # Python-level loop body (~30% faster for high-cardinality fields)
        deque(map(self.hll.update, counts), maxlen=0)
        deque(map(self.freq.update, counts.keys(), counts.values()), maxlen=0)

    def _to_sketches(self) -> None:
        counts, self.exact = self.exact, None
        self.hll = sketches.new_hll(self.config.hll_lg_k)
        self.freq = sketches.new_freq(self.config.frequent_lg_map_size)
        self._add_counts(counts or {})

    def merge(self, other: StringAcc) -> None:
        self.count += other.count
        self.lengths.merge(other.lengths)
        if other.exact is not None:
            self._add_counts(other.exact)
            return
        if self.exact is not None:
            self._to_sketches()
        assert self.hll is not None and self.freq is not None and other.hll is not None
        self.hll = sketches.merge_hll(self.hll, other.hll, self.config.hll_lg_k)
        self.freq.merge(other.freq)

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        d: dict[str, Any] = {"count": self.count, "lengths": self.lengths.state(), "exact": self.exact}
        if self.exact is None:
            assert self.hll is not None and self.freq is not None
            d["hll"] = blobs.put(self.hll.serialize_compact())
            d["freq"] = blobs.put(self.freq.serialize())
        return d

    @staticmethod
    def from_state(d: dict[str, Any], blobs: sketches.Blobs, config: StatsConfig) -> StringAcc:
        acc = StringAcc(config)
        acc.count = int(d["count"])
        acc.lengths = Moments.from_state(d["lengths"])
        acc.exact = d["exact"]
        if acc.exact is None:
            acc.hll = sketches.load_hll(blobs.get(d["hll"]))
            acc.freq = sketches.load_freq(blobs.get(d["freq"]))
        return acc

    def result(self) -> dict[str, Any]:
        lengths = self.lengths.result()
        return {
            "count": self.count,
            "distinct": self._distinct(),
            **self._top(),
            "length": {"min": _int(lengths["min"]), "mean": lengths["mean"], "max": _int(lengths["max"])},
        }

    def _distinct(self) -> dict[str, Any]:
        if self.exact is not None:
            n = len(self.exact)
            return {"value": n, "exact": True, "lower": n, "upper": n}
        assert self.hll is not None
        return {
            "value": round(self.hll.get_estimate()),
            "exact": False,
            "lower": int(self.hll.get_lower_bound(_HLL_STDDEVS)),
            "upper": int(np.ceil(self.hll.get_upper_bound(_HLL_STDDEVS))),
        }

    def _top(self) -> dict[str, Any]:
        k = self.config.top_k
        if self.exact is not None:
            ranked = sorted(self.exact.items(), key=lambda t: (-t[1], t[0]))[:k]
            top = [{"value": v, "count": c, "lower": c, "upper": c} for v, c in ranked]
            # every value with its count while there are few: a schema's domain, categorical drift
            values = None
            if len(self.exact) <= DOMAIN_LIMIT:
                values = [{"value": v, "count": c} for v, c in sorted(self.exact.items())]
            return {"top": top, "top_exact": True, "top_max_error": 0, "values": values}
        items = sketches.frequent_items(self.freq)
        max_error = int(items[0][3] - items[0][2]) if items else 0
        top = [
            {"value": v, "count": int(c), "lower": int(lo), "upper": int(hi)} for v, c, lo, hi in items[:k]
        ]
        return {"top": top, "top_exact": max_error == 0, "top_max_error": max_error, "values": None}


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)
