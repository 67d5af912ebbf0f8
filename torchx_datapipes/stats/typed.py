"""Accumulators for typed values that are not JSON numbers: dates/timestamps and bytes.

Dates and timestamps are profiled on a time axis: each value becomes float64 seconds since
the Unix epoch (a ``date`` is its midnight; a timezone-aware ``datetime`` is converted to UTC;
a naive one is read as UTC wall-clock time, never shifted by the local zone), and a
:class:`NumericAcc` over those seconds gives exact min/max and KLL quantiles and histograms.
The result shows them as ISO 8601 strings, with the epoch seconds beside them.

Bytes are profiled by their length only (a numeric section over lengths in bytes).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.moments import FloatArray
from torchx_datapipes.stats.numeric import NumericAcc

_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_DAY_S = 86400.0


def epoch_seconds(v: Any) -> float:
    """Seconds since 1970-01-01T00:00:00 UTC; NaN for a value with no time (e.g. ``pandas.NaT``)."""
    try:
        if isinstance(v, dt.datetime):
            if v.tzinfo is not None and v.utcoffset() is not None:
                return float(v.timestamp())
            return (v - _EPOCH).total_seconds()
        if isinstance(v, dt.date):
            return (v.toordinal() - _EPOCH_ORDINAL) * _DAY_S
        if isinstance(v, np.datetime64):
            if np.isnat(v):
                return math.nan
            return float(v.astype("datetime64[us]").astype(np.int64)) / 1e6
    except (ValueError, OverflowError, TypeError):
        return math.nan
    raise TypeError(f"not a date or timestamp: {v!r} ({type(v).__name__})")


def iso(seconds: float | None, date_only: bool = False) -> str | None:
    """ISO 8601 text of epoch seconds (UTC); a bare date when ``date_only`` and it is midnight."""
    if seconds is None:
        return None
    t = _EPOCH + dt.timedelta(seconds=seconds)
    if date_only and t.time() == dt.time(0):
        return t.date().isoformat()
    return t.isoformat()


class TemporalAcc:
    """Dates or timestamps of one field: time-axis statistics plus timezone counts."""

    def __init__(self, config: StatsConfig, date_only: bool = False) -> None:
        self.config = config
        self.date_only = date_only
        self.aware = 0
        self.naive = 0
        self.seconds = NumericAcc(config)

    def update(self, values: list[Any]) -> None:
        if not values:
            return
        aware = 0 if self.date_only else sum(1 for v in values if getattr(v, "tzinfo", None) is not None)
        seconds = np.fromiter(map(epoch_seconds, values), dtype=np.float64, count=len(values))
        self.update_seconds(seconds, aware)

    def update_seconds(self, seconds: FloatArray, aware: int = 0) -> None:
        """Add values given as epoch seconds, ``aware`` of them timezone-aware (see :func:`epoch_seconds`)."""
        if not self.date_only:
            self.aware += aware
            self.naive += int(seconds.size) - aware
        self.seconds.update(seconds)

    def merge(self, other: TemporalAcc) -> None:
        self.aware += other.aware
        self.naive += other.naive
        self.seconds.merge(other.seconds)

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        return {"aware": self.aware, "naive": self.naive, "seconds": self.seconds.state(blobs)}

    @staticmethod
    def from_state(
        d: dict[str, Any], blobs: sketches.Blobs, config: StatsConfig, date_only: bool
    ) -> TemporalAcc:
        acc = TemporalAcc(config, date_only)
        acc.aware, acc.naive = int(d["aware"]), int(d["naive"])
        acc.seconds = NumericAcc.from_state(d["seconds"], blobs, config)
        return acc

    def result(self) -> dict[str, Any]:
        num = self.seconds.result()
        show = self._iso
        hist = num["histogram"]
        out: dict[str, Any] = {
            "count": num["count"],
            "invalid": num["nan"],
            "min": show(num["min"]),
            "max": show(num["max"]),
            "median": show(num["median"]),
            "quantiles": [{"q": q["q"], "value": show(q["value"])} for q in num["quantiles"]],
            "timezone": {"aware": self.aware, "naive": self.naive} if not self.date_only else None,
            "histogram": None,
            "epoch_s": num,
        }
        if hist is not None:
            lo, hi = num["min"], num["max"]
            step, edges = calendar_edges(lo, hi, 2 * self.config.bins)
            hist = {**hist, "edges": edges, "counts": self.seconds._counts_between(edges), "unit": step}
            out["histogram"] = {
                **hist,
                "edges": [show(e) for e in hist["edges"]],
                "edges_epoch_s": hist["edges"],
            }
        return out

    def _iso(self, seconds: float | None) -> str | None:
        return iso(seconds, self.date_only)


# calendar steps, finest first: (numpy unit, multiple); a histogram uses the finest one that gives
# at most ``bins`` bins, so its edges fall on whole seconds, minutes, hours, days, months or years
_STEPS = (
    *(("s", n) for n in (1, 5, 15, 30)),
    *(("m", n) for n in (1, 5, 15, 30)),
    *(("h", n) for n in (1, 3, 6, 12)),
    ("D", 1),
    ("D", 7),
    *(("M", n) for n in (1, 3, 6)),
    *(("Y", n) for n in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)),
)
_UNIT_NAMES = {"s": "second", "m": "minute", "h": "hour", "D": "day", "M": "month", "Y": "year"}


def calendar_edges(lo: float, hi: float, bins: int) -> tuple[str, list[float]]:
    """Histogram edges (epoch seconds) on calendar units covering ``[lo, hi]``, and the step's name.

    The first edge is ``lo`` floored to the step, the last is past ``hi``, so a value on the 1st
    of a month falls in that month's bin. Months and years have their real lengths.
    """
    first = np.datetime64(int(math.floor(lo)), "s")
    last = np.datetime64(int(math.floor(hi)), "s")
    for unit, n in _STEPS:
        start, end = first.astype(f"datetime64[{unit}]"), last.astype(f"datetime64[{unit}]")
        if n > 1:  # align multiples to the epoch (e.g. quarters start in Jan, Apr, Jul, Oct)
            start = start - (start.astype(np.int64) % n)
        count = int((end - start).astype(np.int64)) // n + 1
        if count <= bins or (unit, n) == _STEPS[-1]:
            edges = start + np.arange(count + 1) * np.timedelta64(n, unit)  # type: ignore[call-overload]
            secs = edges.astype("datetime64[s]").astype(np.int64).astype(np.float64)
            return f"{n} {_UNIT_NAMES[unit]}{'s' if n > 1 else ''}", [float(e) for e in secs]
    raise AssertionError("unreachable: the last step always returns")


class BytesAcc:
    """Lengths (in bytes) of ``bytes``/``bytearray``/``memoryview`` values."""

    def __init__(self, config: StatsConfig) -> None:
        self.config = config
        self.length = NumericAcc(config)

    def update(self, values: list[Any]) -> None:
        if values:
            self.length.update(np.fromiter(map(_nbytes, values), dtype=np.float64, count=len(values)))

    def merge(self, other: BytesAcc) -> None:
        self.length.merge(other.length)

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        return {"length": self.length.state(blobs)}

    @staticmethod
    def from_state(d: dict[str, Any], blobs: sketches.Blobs, config: StatsConfig) -> BytesAcc:
        acc = BytesAcc(config)
        acc.length = NumericAcc.from_state(d["length"], blobs, config)
        return acc

    def result(self) -> dict[str, Any]:
        length = self.length.result()
        return {"count": length["count"], "length": length}


def _nbytes(v: Any) -> int:
    return v.nbytes if isinstance(v, memoryview) else len(v)
