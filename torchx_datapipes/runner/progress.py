"""Periodic progress lines: records done, records/s and an ETA from bytes consumed."""

import sys
import time
from typing import Callable, TextIO


def _fmt_s(s: float) -> str:
    if s < 90:
        return f"{s:.0f}s"
    if s < 5400:
        return f"{s / 60:.1f}m"
    return f"{s / 3600:.1f}h"


class Progress:
    def __init__(
        self,
        label: str,
        total_bytes: int,
        every_s: float = 5.0,
        out: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.every, self.out, self.clock = (
            label,
            max(total_bytes, 1),
            every_s,
            out,
            clock,
        )
        self.t0 = self.last = clock()
        self.records = 0
        self.bytes_before = 0  # bytes of units already finished

    def update(self, records: int, unit_bytes_done: int) -> None:
        self.records += records
        now = self.clock()
        if self.every > 0 and now - self.last >= self.every:
            self.last = now
            self.out.write(self.line(self.bytes_before + unit_bytes_done, now) + "\n")
            self.out.flush()

    def unit_done(self, nbytes: int) -> None:
        self.bytes_before += nbytes

    def line(self, done_bytes: int, now: float) -> str:
        dt = max(now - self.t0, 1e-9)
        frac = min(done_bytes / self.total, 1.0)
        eta = dt * (1 - frac) / frac if frac > 0 else float("inf")
        eta_s = _fmt_s(eta) if eta != float("inf") else "?"
        return (
            f"[{self.label}] {self.records:,} records, {self.records / dt:,.0f} rec/s, "
            f"{frac:.0%} of {self.total / 1e6:.1f} MB, ETA {eta_s}"
        )
