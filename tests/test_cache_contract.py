"""One cache contract, every provider: the same tests and the same expectations.

Modelled on fsspec's ``tests/abstract``: :class:`CacheContract` holds the tests and a
``make_cache(**options)`` hook; each provider is a one-line subclass naming its URL.
Redis and memcached use the shared servers (``make services``) with a random namespace per
test, so tests never see each other's keys; the only expectation that differs by provider
is ``shared``: ``memory://`` is private to one cache object in one process.
"""

import logging
import multiprocessing
import pickle
import sqlite3
import time
import uuid
from typing import Any, ClassVar, Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest
import torch
from cache_servers import require_shared, wait_until
from pickle_safety import assert_pickle_safe

from torchx_datapipes.cache import Cache, CacheValueError, open_cache
from torchx_datapipes.cache.keys import stored_key

LOGGER = "torchx_datapipes.cache"


def _fork_child(cache: Cache, key: str, conn: Any) -> None:
    """In a forked child: read what the parent stored, then store a value of our own."""
    try:
        conn.send((cache.get(key), cache.set("from-child", [1, 2, 3]), cache.stats().errors))
    except BaseException as e:  # pragma: no cover - reported to the parent
        conn.send(("child failed", repr(e), -1))


class CacheContract:
    """The tests every provider must pass. Subclasses set ``url`` (and ``shared`` when False).

    ``url`` may contain ``{tmp}`` (a per-test temp dir) and ``{memcached2}`` (the address of a
    dedicated memcached for this module).
    """

    url: ClassVar[str]
    shared: ClassVar[bool] = True  # do other cache objects / processes with the same URL see the data?
    needs: ClassVar[Tuple[str, ...]] = ()  # shared servers that must be up ("redis", "memcached")
    big_tensor_bytes: ClassVar[int] = (1 << 20) + 4096  # "1 MiB-ish"

    @pytest.fixture(autouse=True)
    def _contract_setup(self, request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[None]:
        for kind in self.needs:
            require_shared(kind)
        fields = {"tmp": str(tmp_path)}
        if "{memcached2}" in self.url:
            fields["memcached2"] = request.getfixturevalue("memcached_server").address
        self.base_url = self.url.format(**fields)
        self.namespace = "t-" + uuid.uuid4().hex[:16]
        self.made: List[Cache] = []
        yield
        for cache in self.made:  # leave nothing behind on the shared servers
            cache.strict = False
            cache.clear()
            cache.close()

    def make_cache(self, **options: Any) -> Cache:
        """A cache on this provider, in this test's namespace unless ``namespace=`` is given."""
        options.setdefault("namespace", self.namespace)
        cache = open_cache(self.base_url, **options)
        self.made.append(cache)
        return cache

    def test_threads_share_one_cache_object(self) -> None:
        """Several threads on one cache object: each gets its own connection, nothing is lost."""
        import threading

        c = self.make_cache(timeout=5)
        problems: List[str] = []

        def work(t: int) -> None:
            for i in range(30):
                keys = [(t, i, j) for j in range(8)]
                c.set_many({k: [k, "v"] for k in keys})
                got = c.get_many(keys)
                if got != {k: [k, "v"] for k in keys}:
                    problems.append(f"thread {t} batch {i}: {len(got)} of 8 back")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        st = c.stats()
        assert problems == [] and st.errors == 0 and st.bypassed == 0
        assert (st.hits, st.misses, st.sets) == (4 * 30 * 8, 0, 4 * 30 * 8)

    # ------------------------------------------------------------------ basic operations
    def test_set_get_and_overwrite(self) -> None:
        c = self.make_cache()
        assert c.set("a", {"x": 1, "y": [1.5, "two"]}) is True
        assert c.get("a") == {"x": 1, "y": [1.5, "two"]}
        assert c.set("a", "second") is True
        assert c.get("a") == "second"

    def test_default_on_miss(self) -> None:
        c = self.make_cache()
        assert c.get("absent") is None
        assert c.get("absent", 42) == 42
        assert c.get_many(["absent", "also-absent"]) == {}
        st = c.stats()
        assert (st.hits, st.misses, st.errors) == (0, 4, 0)

    def test_get_many_partial_hits_in_request_order(self) -> None:
        c = self.make_cache()
        c.set_many({"a": 1, "c": 3, "e": 5})
        got = c.get_many(["e", "b", "a", "d", "c"])
        assert got == {"e": 5, "a": 1, "c": 3}
        assert list(got) == ["e", "a", "c"]
        assert c.get_many([]) == {}
        assert c.get_many(iter(["c", "c"])) == {"c": 3}  # any iterable; duplicates once

    def test_set_many_dict_pairs_and_generator(self) -> None:
        c = self.make_cache()
        assert c.set_many({"a": 1, "b": 2}) == 2
        assert c.set_many([("c", 3), ("d", 4)]) == 2
        assert c.set_many((f"g{i}", i) for i in range(3)) == 3
        assert c.set_many({}) == 0
        assert c.get_many(["a", "b", "c", "d", "g0", "g1", "g2"]) == {
            "a": 1,
            "b": 2,
            "c": 3,
            "d": 4,
            "g0": 0,
            "g1": 1,
            "g2": 2,
        }

    def test_cached_none_is_not_a_miss(self) -> None:
        c = self.make_cache()
        assert c.set("none", None) is True
        assert c.get("none", "default") is None
        assert c.get_many(["none", "absent"]) == {"none": None}
        assert "none" in c and "absent" not in c

        def compute() -> Any:
            raise AssertionError("a cached None must not be recomputed")

        assert c.get_or_compute("none", compute) is None
        st = c.stats()
        assert (st.hits, st.misses) == (3, 1)

    def test_delete_and_delete_many(self) -> None:
        c = self.make_cache()
        c.set_many({"a": 1, "b": 2, "c": 3, "d": 4})
        c.delete("a")
        c.delete_many(["b", "c", "never-set"])
        c.delete("never-set-either")  # absent keys are fine
        c.delete_many([])
        assert c.get_many(["a", "b", "c", "d"]) == {"d": 4}
        assert c.stats().errors == 0

    def test_contains(self) -> None:
        c = self.make_cache()
        c.set("here", 0)
        assert "here" in c
        assert "there" not in c
        c.delete("here")
        assert "here" not in c

    def test_get_or_compute_calls_compute_once(self) -> None:
        c = self.make_cache()
        calls: List[str] = []

        def compute() -> Dict[str, int]:
            calls.append("k")
            return {"v": 7}

        assert [c.get_or_compute("k", compute) for _ in range(3)] == [{"v": 7}] * 3
        assert calls == ["k"]
        st = c.stats()
        assert (st.hits, st.misses, st.sets) == (2, 1, 1)

    def test_get_or_compute_many_computes_only_missing_with_one_set(self) -> None:
        c = self.make_cache()
        c.set("b", "B")
        core_sets: List[List[str]] = []
        core_set_many = c._set_many

        def spy(items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
            core_sets.append(list(items))
            return core_set_many(items, ttl)

        c._set_many = spy  # type: ignore[method-assign]
        asked: List[List[str]] = []

        def compute(keys: List[str]) -> List[str]:
            asked.append(list(keys))
            return [k.upper() for k in keys]

        assert c.get_or_compute_many(["a", "b", "c", "a"], compute) == ["A", "B", "C", "A"]
        assert asked == [["a", "c"]]
        assert len(core_sets) == 1 and len(core_sets[0]) == 2
        assert c.get_or_compute_many(["c", "a", "b"], compute) == ["C", "A", "B"]
        assert asked == [["a", "c"]] and len(core_sets) == 1  # all hits: no compute, no set
        with pytest.raises(ValueError, match="compute returned 1 values for 2 keys"):
            c.get_or_compute_many(["x", "y"], lambda keys: ["only one"])

    # ------------------------------------------------------------- namespaces, versions
    def test_clear_removes_only_this_namespace_and_version(self) -> None:
        mine = self.make_cache()
        other_ns = self.make_cache(namespace=self.namespace + "-other")
        other_version = self.make_cache(version="2")
        for i, c in enumerate((mine, other_ns, other_version)):
            c.set_many({"k": i, "j": i})
        mine.clear()
        assert mine.get_many(["k", "j"]) == {}
        assert other_ns.get_many(["k", "j"]) == {"k": 1, "j": 1}
        assert other_version.get_many(["k", "j"]) == {"k": 2, "j": 2}
        assert mine.set("k", "again") and mine.get("k") == "again"  # usable after clear
        assert mine.stats().errors == 0

    def test_version_isolation(self) -> None:
        v1 = self.make_cache(version="1")
        v2 = self.make_cache(version="2")
        v1.set("k", "one")
        assert v2.get("k") is None
        v2.set("k", "two")
        assert (v1.get("k"), v2.get("k")) == ("one", "two")

    # ---------------------------------------------------------------------------- keys
    def test_keys_of_many_types(self) -> None:
        c = self.make_cache()
        keys: List[Any] = [
            "with space",
            "new\nline",
            "nul\x00byte",
            "",
            "é ☃ 漢字",
            "x" * 10240,
            b"raw\x00\xff bytes",
            b"",
            0,
            -5,
            2**100,
            3.25,
            -0.5,
            None,
            (1, "a", b"b", (2.5, None)),
            (),
        ]
        stored = c.set_many((k, i) for i, k in enumerate(keys))
        assert stored == len(keys)
        for i, k in enumerate(keys):
            assert c.get(k) == i, k
        assert c.get_many(keys) == {k: i for i, k in enumerate(keys)}
        assert c.get("x" * 10239) is None and c.get("with  space") is None

    def test_unsupported_key_type_raises_type_error_with_hint(self) -> None:
        c = self.make_cache()
        for bad in ([1, 2], {"a": 1}, object(), ("ok", [1])):
            with pytest.raises(TypeError, match="is not supported.*key_fn="):
                c.get(bad)
            with pytest.raises(TypeError, match="is not supported"):
                c.set(bad, 1)

    def test_equal_python_keys_are_different_cache_keys(self) -> None:
        c = self.make_cache()
        c.set_many([(1, "int"), ("1", "str"), (True, "bool"), (1.0, "float"), (b"1", "bytes")])
        assert [c.get(k) for k in (1, "1", True, 1.0, b"1")] == ["int", "str", "bool", "float", "bytes"]
        assert c.get_many([1, "1", b"1"]) == {1: "int", "1": "str", b"1": "bytes"}
        # 1 == True == 1.0 in Python: one dict cannot hold their different values
        with pytest.raises(ValueError, match="1 and True are equal in Python"):
            c.get_many([1, "1", True])
        with pytest.raises(ValueError, match="equal in Python"):
            c.get_or_compute_many([2, 2.0], lambda keys: [repr(k) for k in keys])

    # ----------------------------------------------------------------------------- TTL
    def test_ttl_expiry(self) -> None:
        short = self.make_cache(ttl=1)
        forever = self.make_cache(namespace=self.namespace + "-forever")
        assert short.set("a", 1) and short.set_many({"b": 2, "c": 3}) == 2
        forever.set("p", "kept")
        assert short.get_many(["a", "b", "c"]) == {"a": 1, "b": 2, "c": 3}
        assert "a" in short
        # expiry is the server's (memcached's clock ticks once a second): poll for it, with a deadline
        wait_until(lambda: short.get_many(["a", "b", "c"]) == {}, 10.0, "ttl=1 entries expired")
        assert short.get("a") is None
        assert short.get_many(["a", "b", "c"]) == {}
        assert "b" not in short
        assert forever.get("p") == "kept"
        assert short.get_or_compute("a", lambda: "recomputed") == "recomputed"
        assert short.get("a") == "recomputed"
        assert short.stats().errors == 0

    # ------------------------------------------------------------------- tensors, numpy
    def test_tensors_round_trip(self) -> None:
        c = self.make_cache()
        values = {
            "f32": torch.randn(4, 5),
            "bf16": torch.randn(3, 7).to(torch.bfloat16),
            "scalar": torch.tensor(2.5, dtype=torch.float64),
            "empty": torch.empty(0, 3),
            "i64": torch.arange(-5, 5, dtype=torch.int64) * (2**40),
            "bool": torch.tensor([True, False, True]),
            "strided": torch.arange(24).reshape(4, 6)[:, 1::2],  # not contiguous
            "conj": torch.randn(3, dtype=torch.complex64).conj(),  # a lazy conjugate view
            "fp16": torch.randn(2, 2).half(),
        }
        assert c.set_many(values) == len(values)
        got = c.get_many(list(values))
        for name, want in values.items():
            out = got[name]
            assert isinstance(out, torch.Tensor), name
            assert (out.dtype, out.shape) == (want.dtype, want.shape), name
            assert torch.equal(out, want), name
        out = got["f32"]
        out += 1  # writable, and owned: mutating it never changes the cache
        assert torch.equal(c.get("f32"), values["f32"])

    def test_a_view_stores_only_its_own_elements(self) -> None:
        c = self.make_cache()
        big = torch.arange(1_000_000, dtype=torch.int64)  # 8 MB of storage
        assert c.set("slice", big[1000:1010])
        assert c.set("row", big.reshape(1000, 1000)[7])
        st = c.stats()
        assert st.bytes_written < 8 * 1010 + 2048, st  # the elements, not the 8 MB storage
        assert torch.equal(c.get("slice"), torch.arange(1000, 1010))
        assert torch.equal(c.get("row"), torch.arange(7000, 8000))

    def test_numpy_arrays_come_back_writable(self) -> None:
        c = self.make_cache()
        arr = np.arange(12.0).reshape(3, 4)
        fortran = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
        c.set_many({"arr": arr, "fortran": fortran})
        out = c.get("arr")
        assert out.flags.writeable and out.dtype == arr.dtype
        np.testing.assert_array_equal(out, arr)
        out += 1
        np.testing.assert_array_equal(c.get("arr"), arr)
        f = c.get("fortran")
        assert f.flags.writeable
        np.testing.assert_array_equal(f, fortran)

    def test_dict_of_tensors(self) -> None:
        c = self.make_cache()
        value = {
            "input_ids": torch.arange(17, dtype=torch.int32),
            "mask": torch.ones(17, dtype=torch.int8),
            "emb": torch.randn(17, 8),
            "meta": {"id": "doc-1", "np": np.arange(3, dtype=np.float32)},
        }
        c.set("sample", value)
        out = c.get("sample")
        assert set(out) == set(value)
        for k in ("input_ids", "mask", "emb"):
            assert out[k].dtype == value[k].dtype and torch.equal(out[k], value[k])
        assert out["meta"]["id"] == "doc-1"
        np.testing.assert_array_equal(out["meta"]["np"], value["meta"]["np"])
        out["emb"].mul_(2)  # writable

    def test_large_tensor_round_trip(self) -> None:
        c = self.make_cache()
        t = torch.randn(self.big_tensor_bytes // 4)
        assert c.set("big", t) is True
        out = c.get("big")
        assert out.shape == t.shape and torch.equal(out, t)
        st = c.stats()
        assert st.oversize == st.rejected == st.errors == 0
        assert st.bytes_written >= t.numel() * 4

    # ------------------------------------------------------------------ failure policy
    def test_oversize_values_skipped_counted_logged_once(self, caplog: pytest.LogCaptureFixture) -> None:
        c = self.make_cache(max_value_bytes=256)
        big, small = b"x" * 1000, b"y" * 10
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert c.set("big", big) is False
            assert c.set_many({"big2": big, "small": small, "big3": big}) == 1
        st = c.stats()
        assert (st.oversize, st.sets, st.errors) == (3, 1, 0)
        assert c.get_many(["big", "big2", "small", "big3"]) == {"small": small}
        warnings = [r for r in caplog.records if "max_value_bytes=256" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        strict = self.make_cache(max_value_bytes=256, strict=True)
        with pytest.raises(CacheValueError, match="max_value_bytes=256"):
            strict.set("big", big)

    def _write_raw(self, c: Cache, key: Any, data: bytes) -> str:
        """Store raw bytes under ``key`` through the backend core, bypassing the codec."""
        skey = stored_key(c._prefix(), key)
        c._live()
        assert c._set_many({skey: data}, None) == []
        return skey

    def test_corrupt_value_is_a_counted_miss_and_deleted(self, caplog: pytest.LogCaptureFixture) -> None:
        c = self.make_cache()
        c.set_many({"bad": 1, "good": 2})
        skey = self._write_raw(c, "bad", b"garbage")
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert c.get_many(["bad", "good"]) == {"good": 2}
        st = c.stats()
        assert (st.decode_errors, st.hits, st.misses, st.errors) == (1, 1, 1, 0)
        assert c._get_many([skey]) == {}  # deleted from the backend
        assert "bad" not in c
        assert any("failed to decode" in r.getMessage() for r in caplog.records)
        assert c.get_or_compute("bad", lambda: "fresh") == "fresh"
        assert c.get("bad") == "fresh"
        truncated = c.codec.encode(torch.arange(100))[:-8]
        self._write_raw(c, "short", truncated)
        assert c.get("short") is None and c.stats().decode_errors == 2

    def test_strict_raises_on_corrupt_value(self) -> None:
        c = self.make_cache(strict=True)
        self._write_raw(c, "bad", b"\x00" * 40)
        with pytest.raises(CacheValueError, match="'bad'"):
            c.get("bad")

    def test_stats_counters(self) -> None:
        c = self.make_cache()
        values = {"a": torch.arange(10), "b": "bee", "c": None}
        assert c.set_many(values) == 3
        encoded = sum(len(c.codec.encode(v)) for v in values.values())
        assert c.get_many(["a", "b", "zz"]).keys() == {"a", "b"}
        c.get("c")
        st = c.stats()
        assert (st.sets, st.hits, st.misses, st.errors, st.bypassed) == (3, 3, 1, 0, 0)
        assert st.bytes_written == encoded
        assert st.bytes_read == encoded
        assert st.hit_rate == 0.75
        st.hits = 1000  # a snapshot, not the live counters
        assert c.stats().hits == 3
        assert c.breaker_state == "closed"

    # --------------------------------------------------------- sharing and processes
    def test_two_objects_with_the_same_url_share_data_if_shared(self) -> None:
        a, b = self.make_cache(), self.make_cache()
        a.set("k", "from a")
        assert b.get("k") == ("from a" if self.shared else None)
        b.set("j", "from b")
        assert a.get("j") == ("from b" if self.shared else None)

    def test_close_then_reuse(self) -> None:
        with self.make_cache() as c:
            c.set("k", 1)
        assert c.get("k") == 1  # reconnects; memory:// keeps its dict (close has nothing to close)
        assert c.set("j", 2) and c.get("j") == 2
        assert c.stats().errors == 0

    def test_pickle_round_trip_after_use(self) -> None:
        c = self.make_cache(ttl=3600, timeout=0.25, version="7")
        c.set("k", {"v": 1})
        assert c.get("k") == {"v": 1}  # the connection is live now
        data = pickle.dumps(c)
        c2 = pickle.loads(data)
        assert type(c2) is type(c)
        assert not [k for k in c2.__dict__ if k.startswith("_live") and k != "_live_pid"]
        assert (c2.namespace, c2.version, c2.ttl, c2.timeout) == (self.namespace, "7", 3600, 0.25)
        assert c2.describe() == c.describe()
        self.made.append(c2)
        assert c2.get("k") == ({"v": 1} if self.shared else None)
        assert c2.stats().errors == 0
        assert c.get("k") == {"v": 1}  # the original is untouched

    def test_fork_child_reconnects(self) -> None:
        c = self.make_cache()
        c.set("parent", "hello")
        ctx = multiprocessing.get_context("fork")
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_fork_child, args=(c, "parent", send))
        proc.start()
        got = recv.recv() if recv.poll(30) else ("no answer",)
        proc.join(30)
        assert proc.exitcode == 0
        assert got == (("hello" if self.shared else None), True, 0)
        assert c.get("from-child") == ([1, 2, 3] if self.shared else None)
        assert c.get("parent") == "hello"  # the parent's connection still works

    def test_pickle_safe_in_fresh_interpreters(self) -> None:
        c = self.make_cache()
        value = {"t": [1, 2, 3], "s": "parent"}
        c.set("from-parent", value)
        check = "(type(x).__name__, x.namespace, x.get('from-parent'), x.stats().errors)"
        expected = (type(c).__name__, self.namespace, value if self.shared else None, 0)
        assert_pickle_safe(c, check=check, expected=expected)


class TestMemoryCache(CacheContract):
    url, shared = "memory://", False


class TestSqliteCache(CacheContract):
    url = "sqlite://{tmp}/cache.db"

    def test_expired_rows_are_purged_through_an_index(self) -> None:
        c = self.make_cache(ttl=0.05)
        c.set_many({i: i for i in range(20)})
        time.sleep(0.1)
        c.set("fresh", 1)  # a write with a ttl purges expired rows
        db = sqlite3.connect(c.path)  # type: ignore[attr-defined]
        try:
            assert db.execute("SELECT count(*) FROM kv").fetchone() == (1,)
            plan = db.execute("EXPLAIN QUERY PLAN DELETE FROM kv WHERE expires IS NOT NULL AND expires <= 0")
            assert "kv_expires" in str(plan.fetchall())  # not a scan of the whole table per write
        finally:
            db.close()


class TestRedisCache(CacheContract):
    url, needs = "redis://127.0.0.1:6379/0", ("redis",)


class TestMemcachedCache(CacheContract):
    url, needs = "memcached://127.0.0.1:11211", ("memcached",)
    big_tensor_bytes = 1000 * 1024  # under memcached's 1 MiB item limit

    def test_ttl_over_30_days_is_kept(self) -> None:
        c = self.make_cache(ttl=40 * 86400)  # memcached reads > 30 days as a Unix time
        assert c.set("k", 1) and c.get("k") == 1


class TestMemcachedTwoServers(CacheContract):
    """The shared memcached plus a dedicated one. Basics only: TTL and fresh interpreters are
    the single-server class's job (they do not depend on the number of servers)."""

    url, needs = "memcached://127.0.0.1:11211,{memcached2}", ("memcached",)
    big_tensor_bytes = 1000 * 1024
    test_ttl_expiry = None  # type: ignore[assignment]
    test_pickle_safe_in_fresh_interpreters = None  # type: ignore[assignment]

    def test_keys_land_on_both_servers(self) -> None:
        c = self.make_cache()
        c.set_many({i: i for i in range(50)})
        nodes = {c._live_ring.get_node(stored_key(c._prefix(), i)) for i in range(50)}  # type: ignore[attr-defined]
        assert len(nodes) == 2
        assert c.get_many(range(50)) == {i: i for i in range(50)}
