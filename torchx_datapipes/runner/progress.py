"""Periodic progress lines: records done, records/s and an ETA from bytes consumed.

``Progress`` is one slot's share; ``JobProgress`` is rank 0's job-wide view, a daemon thread
that reads the counters every slot adds to in the job's store (``runner/claim.py``).
"""

import sys
import threading
import time
from typing import Any, Callable, Optional, TextIO


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
        share: Optional[Callable[[int], None]] = None,
        share_s: float = 1.0,
    ) -> None:
        self.label, self.total, self.every, self.out, self.clock = label, total_bytes, every_s, out, clock
        self.t0 = self.last = self.last_share = clock()
        self.records = 0
        self.bytes_before = 0  # bytes of units already finished
        self.share, self.share_s, self.shared = share, share_s, 0  # records added to the job's counters

    def unshared(self) -> int:
        """Records not yet added to the job-wide counters (and count them as added now)."""
        n, self.shared = self.records - self.shared, self.records
        return n

    def update(self, records: int, unit_bytes_done: int) -> None:
        self.records += records
        now = self.clock()
        if self.share is not None and now - self.last_share >= self.share_s:  # a long unit: report midway
            self.last_share = now
            self.share(self.unshared())
        if self.every > 0 and now - self.last >= self.every:
            self.last = now
            self.out.write(self.line(self.bytes_before + unit_bytes_done, now) + "\n")
            self.out.flush()

    def unit_done(self, nbytes: int) -> None:
        self.bytes_before += nbytes

    def line(self, done_bytes: int, now: float) -> str:
        dt = max(now - self.t0, 1e-9)
        if self.total <= 0:  # units are claimed as they go: this slot's share is not known ahead
            return (
                f"[{self.label}] {self.records:,} records, {self.records / dt:,.0f} rec/s,"
                f" {done_bytes / 1e6:.1f} MB read"
            )
        frac = min(done_bytes / self.total, 1.0)
        eta = dt * (1 - frac) / frac if frac > 0 else float("inf")
        eta_s = _fmt_s(eta) if eta != float("inf") else "?"
        return (
            f"[{self.label}] {self.records:,} records, {self.records / dt:,.0f} rec/s, "
            f"{frac:.0%} of {self.total / 1e6:.1f} MB, ETA {eta_s}"
        )


class JobProgress:
    """Rank 0's job-wide progress: units done/total, records/s and ETA across every rank and worker.

    ``counters.add(name, 0)`` reads a counter (``{pass}/units``, ``{pass}/records``, ``{pass}/bytes``).
    ``lock`` is held while reading: the engine takes it around forking its workers.
    """

    def __init__(
        self,
        label: str,
        pass_name: str,
        counters: Any,
        total_units: int,
        total_bytes: int,
        every_s: float,
        out: Optional[TextIO] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.pass_name, self.counters = label, pass_name, counters
        self.total_units, self.total_bytes, self.every, self.clock = total_units, total_bytes, every_s, clock
        self.out = out if out is not None else sys.stderr  # looked up now, not at import
        self.t0 = clock()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def read(self) -> tuple[int, int, int]:
        get = self.counters.add
        p = self.pass_name
        return int(get(f"{p}/units", 0)), int(get(f"{p}/records", 0)), int(get(f"{p}/bytes", 0))

    def line(self, units: int, records: int, done_bytes: int, now: float) -> str:
        dt = max(now - self.t0, 1e-9)
        frac = (
            min(done_bytes / self.total_bytes, 1.0)
            if self.total_bytes > 0
            else units / max(self.total_units, 1)
        )
        eta = _fmt_s(dt * (1 - frac) / frac) if frac > 0 else "?"
        return (
            f"[{self.label}] {units}/{self.total_units} units, {records:,} records,"
            f" {records / dt:,.0f} rec/s, {frac:.0%} of {self.total_bytes / 1e6:.1f} MB, ETA {eta}"
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tdp-job-progress", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                with self.lock:
                    text = self.line(*self.read(), self.clock())
                    self.out.write(text + "\n")
                    self.out.flush()
            except Exception as e:  # progress is best effort: never fail the job for it
                self.out.write(f"[{self.label}] job progress unavailable: {type(e).__name__}: {e}\n")
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
