"""Numeric accumulator: exact counts and moments, KLL quantiles and histograms.

NaN and +/-inf are counted and excluded from everything else (moments, min/max, quantiles,
histograms), so those describe the finite values only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.moments import FloatArray, Moments

# integer values spanning at most this range are counted with bincount (O(n), a 512 KiB array at
# most) instead of np.unique (a sort): cheap for masks, labels, years and pixels of big tensors
_BINCOUNT_SPAN = 1 << 16
# exact value counts are kept for integers float64 holds exactly (and JSON writers accept):
# beyond 2**53 a "count per value" would merge distinct integers (and int(v) may exceed 64 bits)
_EXACT_INT = float(1 << 53)


class NumericAcc:
    """Statistics of int and float values (bools are counted separately, not here)."""

    def __init__(self, config: StatsConfig) -> None:
        self.config = config
        self.count = 0
        self.nan = 0
        self.pos_inf = 0
        self.neg_inf = 0
        self.zeros = 0
        self.moments = Moments()
        self.kll = sketches.new_kll(config.kll_k)
        # exact counts of the finite values while they are all integers with few distinct values
        self.values: dict[float, int] | None = {} if config.discrete_limit > 0 else None

    def update(self, values: FloatArray) -> None:
        """Add one batch as a float64 array; the sketch takes the whole array at once."""
        if values.size == 0:
            return
        self.count += int(values.size)
        finite_mask = np.isfinite(values)
        if finite_mask.all():
            finite = values
        else:
            finite = values[finite_mask]
            self.nan += int(np.count_nonzero(np.isnan(values)))
            self.pos_inf += int(np.count_nonzero(values == np.inf))
            self.neg_inf += int(np.count_nonzero(values == -np.inf))
        if finite.size == 0:
            return
        self.zeros += int(finite.size - np.count_nonzero(finite))
        self.moments.update(finite)
        self.kll.update(finite)
        if self.values is not None:
            self._count_values(finite)

    def _count_values(self, finite: FloatArray) -> None:
        assert self.values is not None
        if not np.array_equal(finite, np.floor(finite)):
            self.values = None
            return
        lo, hi = float(finite.min()), float(finite.max())
        if lo < -_EXACT_INT or hi > _EXACT_INT:
            self.values = None
            return
        if hi - lo <= _BINCOUNT_SPAN:  # O(n), no sort: cheap for masks, labels, years, pixels
            counts = np.bincount((finite - lo).astype(np.int64))
            nz = np.flatnonzero(counts)
            self._add_values(zip((nz + lo).tolist(), counts[nz].tolist(), strict=True))
            return
        uniq, ucounts = np.unique(finite, return_counts=True)
        self._add_values(zip(uniq.tolist(), ucounts.tolist(), strict=True))

    def _add_values(self, pairs: Any) -> None:
        values = self.values
        assert values is not None
        for v, c in pairs:
            values[v] = values.get(v, 0) + int(c)
        if len(values) > self.config.discrete_limit:
            self.values = None

    def merge(self, other: NumericAcc) -> None:
        self.count += other.count
        self.nan += other.nan
        self.pos_inf += other.pos_inf
        self.neg_inf += other.neg_inf
        self.zeros += other.zeros
        self.moments.merge(other.moments)
        self.kll.merge(other.kll)
        if self.values is not None:
            if other.values is None:
                self.values = None
            else:
                self._add_values(other.values.items())

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        return {
            "count": self.count,
            "nan": self.nan,
            "pos_inf": self.pos_inf,
            "neg_inf": self.neg_inf,
            "zeros": self.zeros,
            "moments": self.moments.state(),
            "kll": blobs.put(self.kll.serialize()),
            "values": None if self.values is None else sorted(self.values.items()),
        }

    @staticmethod
    def from_state(d: dict[str, Any], blobs: sketches.Blobs, config: StatsConfig) -> NumericAcc:
        acc = NumericAcc(config)
        acc.count, acc.nan, acc.pos_inf, acc.neg_inf = d["count"], d["nan"], d["pos_inf"], d["neg_inf"]
        acc.zeros = d["zeros"]
        acc.moments = Moments.from_state(d["moments"])
        acc.kll = sketches.load_kll(blobs.get(d["kll"]))
        values = d.get("values")
        acc.values = None if values is None else {float(v): int(c) for v, c in values}
        return acc

    def result(self) -> dict[str, Any]:
        finite = self.moments.count
        out: dict[str, Any] = {
            "count": self.count,
            "finite": finite,
            "nan": self.nan,
            "pos_inf": self.pos_inf,
            "neg_inf": self.neg_inf,
            "zeros": self.zeros,
            **self.moments.result(),
            "value_counts": self._value_counts(),
        }
        out.update(self._sketch_result())
        return out

    def _value_counts(self) -> list[dict[str, Any]] | None:
        if self.values is None or not self.values:
            return None
        return [{"value": int(v), "count": c} for v, c in sorted(self.values.items())]

    def _sketch_result(self) -> dict[str, Any]:
        exact = not self.kll.is_estimation_mode()
        out: dict[str, Any] = {
            "quantile_rank_error": 0.0 if exact else float(self.kll.normalized_rank_error(False)),
            "quantiles_exact": exact,
            # linear: exact, interpolated between the two nearest values as pandas/numpy do
            # (the median of an even count is the mean of the middle two); kll: sketch estimates
            "quantiles_method": "linear" if exact else "kll",
            "median": None,
            "quantiles": [{"q": q, "value": None} for q in self.config.quantiles],
            "histogram": None,
            "quantile_histogram": None,
        }
        if self.kll.is_empty():
            return out
        if exact:  # every value is in the sketch: pandas' default (linear interpolation between ranks)
            items = np.sort(np.fromiter((v for v, _ in self.kll), dtype=np.float64))
            out["median"] = float(np.quantile(items, 0.5))
            values = [float(v) for v in np.quantile(items, list(self.config.quantiles))]
        else:  # the sketch's own estimates, within quantile_rank_error
            out["median"] = float(self.kll.get_quantile(0.5))
            values = [float(v) for v in self.kll.get_quantiles(list(self.config.quantiles))]
        out["quantiles"] = [{"q": q, "value": v} for q, v in zip(self.config.quantiles, values, strict=True)]
        out["histogram"] = self._histogram(exact)
        assert self.moments.min is not None and self.moments.max is not None  # kll is not empty
        qedges = [self.moments.min, *values, self.moments.max]
        out["quantile_histogram"] = {"edges": qedges, "counts": self._counts_between(qedges)}
        return out

    def _histogram(self, exact: bool) -> dict[str, Any]:
        lo, hi = self.moments.min, self.moments.max
        assert lo is not None and hi is not None
        bins = self.config.bins if hi > lo else 1
        edges = [float(e) for e in np.linspace(lo, hi, bins + 1)]
        return {
            "edges": edges,
            "counts": self._counts_between(edges),
            "exact": exact,
            "count_error": 0.0 if exact else float(self.kll.normalized_rank_error(True)),
        }

    def _counts_between(self, edges: list[float]) -> list[int]:
        """Counts in ``[e_i, e_i+1)`` (the last bin closed) from the sketch's ranks.

        Rounding cumulative counts (not per-bin masses) keeps the total exactly ``finite``.
        """
        n = self.moments.count
        cum = [0] + [round(self.kll.get_rank(e, False) * n) for e in edges[1:-1]] + [n]
        cum = list(np.maximum.accumulate(cum))
        return [int(b - a) for a, b in zip(cum[:-1], cum[1:], strict=True)]
