"""Exact, mergeable moments: Welford/Chan in float64.

Each batch's count, mean and M2 (sum of squared deviations) come from numpy on the whole
array (pairwise summation), then the batch is merged with Chan et al.'s parallel formula:
https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance#Parallel_algorithm
Merging is associative and commutative up to floating-point rounding, so any partitioning and
merge order gives the same mean/std to ~1e-12 relative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass
class Moments:
    """Count, mean, M2, sum, min and max of finite float64 values."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    total: float = 0.0
    min: float | None = None
    max: float | None = None

    def update(self, values: FloatArray) -> None:
        """Add a batch of finite values (NaN and inf must already be removed)."""
        n = int(values.size)
        if n == 0:
            return
        mean = float(values.mean())
        dev = values - mean
        # square + pairwise sum, not np.dot: OpenBLAS's threads spin on a busy machine (100x slower)
        m2 = float(np.square(dev).sum())
        batch = Moments(n, mean, m2, float(values.sum()), float(values.min()), float(values.max()))
        self.merge(batch)

    def merge(self, other: Moments) -> None:
        """Chan's parallel merge of two sets of moments."""
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.mean, self.m2, self.total = other.count, other.mean, other.m2, other.total
            self.min, self.max = other.min, other.max
            return
        n = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * (other.count / n)
        self.m2 += other.m2 + delta * delta * (self.count * other.count / n)
        self.count = n
        self.total += other.total
        self.min = _opt(min, self.min, other.min)
        self.max = _opt(max, self.max, other.max)

    def variance(self, ddof: int) -> float | None:
        """Population (``ddof=0``) or sample (``ddof=1``) variance; ``None`` if undefined."""
        if self.count - ddof <= 0:
            return None
        return max(self.m2, 0.0) / (self.count - ddof)

    def std(self, ddof: int) -> float | None:
        var = self.variance(ddof)
        return None if var is None else math.sqrt(var)

    def state(self) -> dict[str, Any]:
        return {
            "n": self.count,
            "mean": self.mean,
            "m2": self.m2,
            "sum": self.total,
            "min": self.min,
            "max": self.max,
        }

    @staticmethod
    def from_state(d: dict[str, Any]) -> Moments:
        return Moments(int(d["n"]), float(d["mean"]), float(d["m2"]), float(d["sum"]), d["min"], d["max"])

    def result(self) -> dict[str, Any]:
        """The user-facing summary: ``None`` where a statistic is undefined (no values)."""
        empty = self.count == 0
        return {
            "mean": None if empty else self.mean,
            "std_pop": self.std(0),
            "std_sample": self.std(1),
            "min": self.min,
            "max": self.max,
            "sum": self.total,
        }


def _opt(fn: Any, a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return float(fn(a, b))
