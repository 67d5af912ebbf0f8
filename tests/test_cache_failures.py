"""The failure policy against real, misbehaving servers: a job never fails, never gets a wrong value.

Each test talks to a dedicated redis-server / memcached process (``cache_servers.py``) that
it may stop, restart or freeze with SIGSTOP; the shared servers are never touched.
"""

import logging
import os
import socket
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
from cache_servers import Server, cache_url, free_port, start, start_memcached, start_redis, thread_states

from torchx_datapipes.cache import Cache, CacheBackendError, CacheValueError, open_cache
from torchx_datapipes.cache.keys import stored_key

LOGGER = "torchx_datapipes.cache"
KINDS = ["redis", "memcached"]
# A hung call must end near the configured timeout, not at the 5 s defaults of redis-py, pymemcache
# or sqlite3. The limit only catches those (and hangs): on a busy 2-core machine a 0.3 s timeout
# plus scheduling delay must never come near it. Speed itself is measured by the benchmarks.
TIMEOUT_S, HUNG_CALL_LIMIT_S = 0.3, 2.5


def _ns() -> str:
    return "f-" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module", params=KINDS)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A dedicated server of each kind, shared by this module's tests of that kind."""
    srv = start(request.param)
    try:
        yield srv
    finally:
        srv.cleanup()


def _ensure_up(server: Server) -> None:
    if server.paused:
        server.resume()
    if server.proc is None or server.proc.poll() is not None:
        server.start()


@pytest.fixture()
def healthy(server: Server) -> Iterator[Server]:
    """The dedicated server, running and answering before and after the test."""
    _ensure_up(server)
    yield server
    _ensure_up(server)


def _open(server: Server, **options: Any) -> Cache:
    options.setdefault("namespace", _ns())
    return open_cache(cache_url(server.kind, server.address), **options)


def _value(i: int) -> Tuple[int, str]:
    return i, f"value-{i}" * 3


def _source(i: int) -> Tuple[int, str]:
    time.sleep(0.005)  # a source that costs something: the loop spans the breaker's cool-down
    return _value(i)


def test_server_stopped_mid_run_job_completes(healthy: Server) -> None:
    cache = _open(healthy, cooldown=0.15, failures=2, timeout=TIMEOUT_S)
    results: List[Any] = []
    for i in range(200):
        if i == 50:
            healthy.stop()
        if i == 140:
            down, down_state = cache.stats(), cache.breaker_state
            healthy.start()
        results.append(cache.get_or_compute(i, lambda i=i: _source(i)))
    assert results == [_value(i) for i in range(200)]  # every value right: the job completed
    assert down.sets == 50 and down.errors > 0 and down.breaker_opens >= 1 and down.bypassed > 0
    assert down_state in ("open", "half_open")
    assert cache.breaker_state == "closed"
    st = cache.stats()
    assert st.sets > down.sets, st  # writes resumed after the restart
    assert st.rejected == 0 and st.decode_errors == 0
    later = list(range(185, 200))  # computed well after restart + cool-down
    assert cache.get_many(later) == {k: _value(k) for k in later}, st  # hits resumed
    assert cache.get_many(range(0, 50)) == {}  # the restarted server lost the old data: misses


def _timed(fn: Callable[[], Any]) -> Tuple[Any, float]:
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0


_PING = {"redis": (b"PING\r\n", b"+PONG"), "memcached": (b"version\r\n", b"VERSION ")}


def _answers(server: Server, wait_s: float) -> bool:
    """Whether the server answers a raw ping within ``wait_s`` (the kernel accepts either way)."""
    ping, want = _PING[server.kind]
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait_s) as sock:
        sock.sendall(ping)
        try:
            return sock.recv(64).startswith(want)
        except TimeoutError:
            return False


def test_pause_returns_once_every_thread_is_stopped(healthy: Server) -> None:
    """The helper itself: SIGSTOP reaches memcached's threads one by one; pause() waits for all."""
    assert healthy.proc is not None
    running = thread_states(healthy.proc.pid)
    assert running and "T" not in running and (healthy.kind == "redis" or len(running) > 1), running
    for _ in range(5):
        healthy.pause()
        assert set(thread_states(healthy.proc.pid)) == {"T"}
        assert not _answers(healthy, 0.2)  # at once: no thread is left to answer
        healthy.resume()
        assert "T" not in thread_states(healthy.proc.pid)
        assert _answers(healthy, 5.0)


def test_hung_server_calls_end_within_the_timeout(healthy: Server) -> None:
    cache = _open(healthy, timeout=TIMEOUT_S, failures=100)  # the breaker stays closed: every call waits
    assert cache.set("k", "v") and cache.get("k") == "v"
    healthy.pause()
    calls: List[Tuple[str, Callable[[], Any], Any]] = [
        ("get", lambda: cache.get("k"), None),
        ("get_many", lambda: cache.get_many(["k", "j"]), {}),
        ("set", lambda: cache.set("j", 1), False),
        ("set_many", lambda: cache.set_many({"a": 1, "b": 2}), 0),
        ("in", lambda: "k" in cache, False),
        ("get_or_compute", lambda: cache.get_or_compute("k", lambda: "source"), "source"),
        ("delete", lambda: cache.delete("k"), None),
        ("clear", lambda: cache.clear(), None),
    ]
    for name, fn, want in calls:
        errors = cache.stats().errors
        out, took = _timed(fn)
        assert out == want, name
        assert took < HUNG_CALL_LIMIT_S, f"{name} took {took:.2f}s against a hung server"
        assert cache.stats().errors > errors, name
    st = cache.stats()
    assert st.hits == 1 and st.breaker_opens == 0

    default = _open(healthy, timeout=TIMEOUT_S)  # failures=2: the third call is not even sent
    default.get("k")
    default.get("k")
    out, took = _timed(lambda: default.get_many(["k", "j"]))
    assert out == {} and default.stats().bypassed == 1  # not sent: did not wait for the hung server
    assert took < TIMEOUT_S, f"a bypassed call took {took:.2f}s"
    assert default.breaker_state == "open"

    healthy.resume()
    fresh = _open(healthy, timeout=TIMEOUT_S)
    assert fresh.set("after", 1) and fresh.get("after") == 1
    errors = cache.stats().errors
    assert cache.get("never") is None and cache.stats().errors == errors  # answering again


@pytest.mark.parametrize("kind", KINDS)
def test_connection_refused_is_a_fast_miss(kind: str) -> None:
    port = free_port()  # nothing listens here
    cache = open_cache(cache_url(kind, f"127.0.0.1:{port}"), timeout=TIMEOUT_S, namespace=_ns())
    t0 = time.monotonic()
    assert cache.set("k", 1) is False
    assert cache.get("k") is None
    assert cache.get_many(["k", "j"]) == {}
    assert "k" not in cache
    assert cache.get_or_compute("k", lambda: "source") == "source"
    cache.clear()
    cache.delete("k")
    assert time.monotonic() - t0 < HUNG_CALL_LIMIT_S  # refused at once, never a wait for a timeout
    st = cache.stats()
    assert st.errors == 2 and st.bypassed >= 4 and st.breaker_opens == 1 and st.sets == 0


def test_strict_raises_against_a_stopped_server(healthy: Server) -> None:
    cache = _open(healthy, strict=True, timeout=TIMEOUT_S, failures=2)
    cache.set("k", 1)
    healthy.stop()
    with pytest.raises(CacheBackendError, match="get failed"):
        cache.get("k")
    with pytest.raises(CacheBackendError, match="set failed"):
        cache.set("k", 2)
    with pytest.raises(CacheBackendError, match="circuit breaker open"):
        cache.get_many(["k"])


@pytest.fixture(scope="module")
def two_memcached() -> Iterator[Tuple[Server, Server]]:
    a, b = start_memcached(), start_memcached()
    try:
        yield a, b
    finally:
        a.cleanup()
        b.cleanup()


def test_memcached_two_servers_one_stopped(two_memcached: Tuple[Server, Server]) -> None:
    a, b = two_memcached
    cache = open_cache(f"memcached://{a.address},{b.address}", timeout=TIMEOUT_S, namespace=_ns())
    values = {i: f"v{i}" for i in range(100)}
    assert cache.set_many(values) == 100
    ring = cache._live_ring  # type: ignore[attr-defined]
    on_a = {i for i in values if ring.get_node(stored_key(cache._prefix(), i)) == a.address}
    assert 10 < len(on_a) < 90
    b.stop()
    try:
        got = cache.get_many(values)
        assert got == {i: values[i] for i in on_a}  # live server hits, dead server misses, nothing wrong
        assert cache.stats().errors >= 1
        assert cache.breaker_state == "closed"  # one dead server does not stop the other
        fresh = {i: f"w{i}" for i in range(100, 200)}
        new_on_a = {i for i in fresh if ring.get_node(stored_key(cache._prefix(), i)) == a.address}
        assert cache.set_many(fresh) == len(new_on_a)
        assert cache.get_many(fresh) == {i: fresh[i] for i in new_on_a}
        st = cache.stats()
        assert st.hits == len(on_a) + len(new_on_a) and st.decode_errors == 0
    finally:
        b.start()


def test_redis_rejected_writes_are_counted_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    srv = start_redis("--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
    try:
        cache = _open(srv)
        # each value alone takes the server over 1 MiB while its command is read: always refused
        big = {f"k{i}": os.urandom(1 << 20) for i in range(3)}
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert cache.set_many(big) == 0
            assert cache.set("k", os.urandom(1 << 20)) is False
        st = cache.stats()
        assert st.rejected == 4 and st.sets == 0 and st.errors == 0 and st.breaker_opens == 0
        assert cache.get_many([*big, "k"]) == {}
        assert any("refused 3 of 3 values" in r.getMessage() for r in caplog.records)
        with_ttl = _open(srv, ttl=60)  # the pipelined SET PX path
        assert with_ttl.set_many(big) == 0 and with_ttl.stats().rejected == 3
        strict = _open(srv, strict=True)
        with pytest.raises(CacheValueError, match="refused"):
            strict.set_many(big)
    finally:
        srv.cleanup()


def test_memcached_server_rejects_an_item_over_its_limit() -> None:
    srv = start_memcached("-I", "1m")
    try:
        cache = _open(srv, max_value_bytes=3 << 20)  # the client lets it through; the server refuses
        assert cache.set("k", b"old")
        assert cache.set("k", os.urandom(2 << 20)) is False
        st = cache.stats()
        assert (st.rejected, st.oversize, st.errors) == (1, 0, 0)
        assert cache.get("k") is None  # never the old or a truncated value
        assert cache.set_many({"small": b"s", "huge": os.urandom(2 << 20)}) == 0  # one batch, refused whole
        assert cache.set("small", b"s") and cache.get("small") == b"s"  # the connection recovered
        assert cache.stats().errors == 0
    finally:
        srv.cleanup()


def test_sqlite_not_a_database_file(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    path.write_bytes(b"this is not a sqlite database\n" * 200)
    cache = open_cache(f"sqlite://{path}", namespace=_ns())
    assert cache.set("k", 1) is False
    assert cache.get("k") is None
    assert cache.get_or_compute("k", lambda: "source") == "source"
    st = cache.stats()
    assert st.errors >= 1 and st.hits == 0
    assert path.read_bytes().startswith(b"this is not")  # nothing was overwritten
    with pytest.raises(CacheBackendError, match="file is not a database"):
        open_cache(f"sqlite://{path}", strict=True).get("k")


def test_sqlite_lock_contention_is_a_miss_not_a_corruption(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/cache.db?namespace=lock&lock_timeout=0.2&failures=100"
    cache = open_cache(url)
    assert cache.set("k", "v1")
    other = sqlite3.connect(tmp_path / "cache.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        t0 = time.monotonic()
        assert cache.set("k", "v2") is False
        assert time.monotonic() - t0 < HUNG_CALL_LIMIT_S  # lock_timeout=0.2, not sqlite3's 5 s default
        assert cache.get("k") == "v1"  # WAL: readers are not blocked by the writer
        assert cache.stats().errors == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert cache.set("k", "v3") and cache.get("k") == "v3"
    check = sqlite3.connect(tmp_path / "cache.db")
    assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check.close()


def _writer(url: str, worker: int, n: int) -> Dict[str, int]:
    cache = open_cache(url)
    for i in range(n):
        cache.set_many({(worker, i, j): (worker, i, j) for j in range(20)})
    return cache.stats().as_dict()


def test_sqlite_concurrent_writers(tmp_path: Path) -> None:
    import multiprocessing

    url = f"sqlite://{tmp_path}/cache.db?namespace=many"
    with multiprocessing.get_context("fork").Pool(3) as pool:
        stats = pool.starmap(_writer, [(url, w, 40) for w in range(3)])
    assert all(s["errors"] == 0 and s["sets"] == 40 * 20 for s in stats), stats
    cache = open_cache(url)
    keys = [(w, i, j) for w in range(3) for i in range(40) for j in range(20)]
    assert cache.get_many(keys) == {k: k for k in keys}
