"""The circuit breaker, on a fake clock: nothing sleeps."""

from typing import Any, List, Optional

import pytest

from torchx_datapipes.cache import CacheBackendError, CacheStats
from torchx_datapipes.cache.breaker import CircuitBreaker, State
from torchx_datapipes.cache.providers.memory import MemoryCache


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_opens_after_n_consecutive_failures() -> None:
    clock = FakeClock()
    b = CircuitBreaker(failures=3, cooldown=5, clock=clock)
    assert b.allow() and b.state is State.CLOSED
    assert b.failure() is False and b.failure() is False
    b.success()  # a success resets the count: failures must be consecutive
    assert b.failure() is False and b.failure() is False
    assert b.allow()
    assert b.failure() is True  # the third in a row opens it
    assert b.state is State.OPEN and b.opens == 1
    assert not b.allow()
    clock.advance(4.99)
    assert not b.allow()


def test_half_open_probe_after_cooldown_closes_on_success() -> None:
    clock = FakeClock()
    b = CircuitBreaker(failures=1, cooldown=5, clock=clock)
    assert b.failure() is True
    clock.advance(5)
    assert b.allow() and b.state is State.HALF_OPEN  # one probe may go
    b.success()
    assert b.state is State.CLOSED and b.allow()
    assert b.failure() is True and b.opens == 2  # closed again: the next failure opens anew


def test_failed_probe_reopens_for_a_full_cooldown() -> None:
    clock = FakeClock()
    b = CircuitBreaker(failures=2, cooldown=5, clock=clock)
    b.failure()
    b.failure()
    clock.advance(6)
    assert b.allow() and b.state is State.HALF_OPEN
    assert b.failure() is True  # a single failed probe re-opens, without `failures` more
    assert b.state is State.OPEN and b.opens == 2
    clock.advance(4.9)
    assert not b.allow()  # the cool-down restarts at the failed probe
    clock.advance(0.1)
    assert b.allow()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="failures >= 1 and cooldown >= 0, got 0, 5"):
        CircuitBreaker(failures=0, cooldown=5)
    with pytest.raises(ValueError, match="got 1, -1"):
        CircuitBreaker(failures=1, cooldown=-1)


class FlakyMemoryCache(MemoryCache):
    """A memory cache whose core fails while ``down`` is set."""

    down = False
    core_calls = 0

    def _get_many(self, keys: List[str]) -> Any:
        self.core_calls += 1
        if self.down:
            raise ConnectionError("server down")
        return super()._get_many(keys)

    def _set_many(self, items: Any, ttl: Optional[float]) -> List[str]:
        self.core_calls += 1
        if self.down:
            raise ConnectionError("server down")
        return super()._set_many(items, ttl)


def test_cache_uses_the_breaker_with_the_injected_clock() -> None:
    clock = FakeClock()
    c = FlakyMemoryCache(failures=2, cooldown=10, clock=clock)
    c.set("k", 1)
    c.down = True
    assert c.get("k") is None and c.set("j", 2) is False  # two errors: open
    assert c.breaker_state == "open"
    calls = c.core_calls
    assert c.get_or_compute("k", lambda: "source") == "source"  # bypassed: no core call
    assert c.core_calls == calls
    st = c.stats()
    assert (st.errors, st.breaker_opens, st.bypassed, st.hits) == (2, 1, 2, 0)

    clock.advance(10)
    assert c.get("k") is None  # the probe fails: open again
    assert c.breaker_state == "open" and c.stats().breaker_opens == 2 and c.core_calls == calls + 1

    c.down = False
    clock.advance(10)
    assert c.get("k") == 1  # the probe succeeds: closed
    assert c.breaker_state == "closed"
    assert c.set("j", 2) and c.get("j") == 2
    assert c.stats() == CacheStats(
        hits=2,
        misses=3,
        errors=3,
        bypassed=2,
        sets=2,
        bytes_read=c.stats().bytes_read,
        bytes_written=c.stats().bytes_written,
        breaker_opens=2,
    )


def test_strict_cache_raises_while_the_breaker_is_open() -> None:
    clock = FakeClock()
    c = FlakyMemoryCache(failures=1, cooldown=10, clock=clock, strict=True)
    c.down = True
    with pytest.raises(CacheBackendError, match="get failed: ConnectionError: server down"):
        c.get("k")
    with pytest.raises(CacheBackendError, match="circuit breaker open, set not sent"):
        c.set("k", 1)


def test_stats_merge_across_processes() -> None:
    a = CacheStats(hits=3, misses=1, errors=2, bytes_read=10)
    b = CacheStats(hits=1, misses=3, rejected=4, bytes_read=5)
    total = a + b
    assert (total.hits, total.misses, total.errors, total.rejected, total.bytes_read) == (4, 4, 2, 4, 15)
    assert total.hit_rate == 0.5 and CacheStats().hit_rate == 0.0
    assert CacheStats.from_dict({**total.as_dict(), "unknown": 1}) == total
