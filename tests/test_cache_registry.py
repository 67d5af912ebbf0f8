"""Cache URLs: parsing errors, the registry layers (table, register_cache, entry points), lazy imports."""

import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest
from pickle_safety import PACKAGE_ROOT

from torchx_datapipes import plugins
from torchx_datapipes.cache import Cache, open_cache, register_cache, registry, schemes
from torchx_datapipes.cache.providers.memcached import MemcachedCache, _expire
from torchx_datapipes.cache.providers.memory import MemoryCache
from torchx_datapipes.cache.providers.redis import RedisCache
from torchx_datapipes.cache.providers.sqlite import SqliteCache


class DictCache(Cache):
    """A minimal third-party provider: a dict, shared by every object of the class."""

    scheme = "dictcache"
    store: Dict[str, bytes] = {}

    def __init__(self, location: str = "", **options: Any) -> None:
        super().__init__(**options)
        self.location = location

    @classmethod
    def from_url(cls, location: str, path: str, **options: Any) -> "DictCache":
        return cls(location + path, **options)

    def _get_many(self, keys: List[str]) -> Dict[str, bytes]:
        return {k: self.store[k] for k in keys if k in self.store}

    def _set_many(self, items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
        self.store.update(items)
        return []

    def _delete_many(self, keys: List[str]) -> None:
        for k in keys:
            self.store.pop(k, None)

    def _clear(self, prefix: str) -> None:
        for k in [k for k in self.store if k.startswith(prefix)]:
            del self.store[k]

    def _close(self) -> None:
        pass


class OtherDictCache(DictCache):
    pass


@pytest.fixture()
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(registry.PROVIDERS, "_registered", {})
    monkeypatch.setattr(registry.PROVIDERS, "_loaded", {})
    plugins.forget_entry_points()
    yield
    plugins.forget_entry_points()


# ----------------------------------------------------------------------- URL parsing
@pytest.mark.parametrize(
    "url, message",
    [
        ("nosuch://host", "unknown cache scheme 'nosuch'; known: memcached, memory, redis"),
        ("/dev/shm/cache.db", "has no scheme"),
        ("memory://?ttl=5&colour=red", "unknown option 'colour'; valid: namespace, version, ttl"),
        ("memory://?ttl=abc", "option ttl='abc' is not valid"),
        ("memory://?strict=maybe", "option strict='maybe' is not valid: expected true or false"),
        ("memory://?failures=2.5", "option failures='2.5' is not valid"),
        ("memory://?ttl=-1", "ttl must be > 0 seconds or None, got -1.0"),
        ("memory://?timeout=0", "timeout must be > 0 seconds, got 0.0"),
        ("memory://?failures=0", "breaker needs failures >= 1"),
        ("memory://?codec=json", "unknown codec 'json'; valid: ['bytes', 'pickle', 'tensor']"),
        ("memory://?namespace=a%20b", "cache namespace 'a b' is not valid"),
        ("memory://?version=1:2", "cache version '1:2' is not valid"),
        ("memory://?max_items=0", "max_items must be >= 1 or None, got 0"),
        ("sqlite://dbhost/cache.db", "sqlite cache URL has a host part 'dbhost'"),
        ("sqlite://dbhost", "sqlite cache URL has a host part"),
        ("memcached://127.0.0.1:abc", "memcached server '127.0.0.1:abc' is not host:port"),
        ("memcached://127.0.0.1:11211,cachehost", "memcached server 'cachehost' is not host:port"),
        ("memcached://127.0.0.1:11211/0", "memcached URL takes no path, got '/0'"),
        ("redis://", "redis cache URL 'redis://' is not valid"),
    ],
)
def test_bad_urls_name_the_bad_value(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        open_cache(url)
    assert message in str(info.value)


def test_urls_parse_into_provider_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = open_cache("memory://?namespace=tok&version=3&ttl=60&strict=yes&max_items=10&codec=pickle")
    assert isinstance(c, MemoryCache)
    assert (c.namespace, c.version, c.ttl, c.strict, c.max_items) == ("tok", "3", 60.0, True, 10)
    assert type(c.codec).__name__ == "PickleCodec"
    assert open_cache("memory://?ttl=5", ttl=7).ttl == 7  # keywords override the URL
    assert open_cache(c) is c

    s = open_cache(f"sqlite://{tmp_path}/x.db?lock_timeout=0.5&mmap_bytes=0")
    assert isinstance(s, SqliteCache) and (s.path, s.lock_timeout, s.mmap_bytes) == (
        f"{tmp_path}/x.db",
        0.5,
        0,
    )
    monkeypatch.chdir(tmp_path)
    rel = open_cache("sqlite://./rel/cache.db")  # the form the host-part error recommends
    assert isinstance(rel, SqliteCache) and rel.path == f"{tmp_path}/rel/cache.db"

    r = open_cache("redis://:secret@127.0.0.1:6380/2?timeout=0.2&failures=3&cooldown=1")
    assert isinstance(r, RedisCache)
    assert (r.timeout, r.failures, r.cooldown) == (0.2, 3, 1.0)
    assert r.describe() == "redis://127.0.0.1:6380/2"
    assert "secret" not in repr(r) and "secret" not in r.describe()
    assert open_cache("rediss://cache.example:6390/1").describe() == "rediss://cache.example:6390/1"

    m = open_cache("memcached://10.0.0.1:11211, 10.0.0.2:11212,[::1]:11213?max_value_bytes=2000000")
    assert isinstance(m, MemcachedCache)
    assert m.servers == (("10.0.0.1", 11211), ("10.0.0.2", 11212), ("::1", 11213))
    assert m.max_value_bytes == 2_000_000


def test_memcached_ttl_over_30_days_is_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    # memcached reads an exptime over 30 days as a Unix time: a relative 40 days would be 1970
    monkeypatch.setattr("time.time", lambda: 1_700_000_000.5)
    assert _expire(None) == 0
    assert (_expire(0.2), _expire(1), _expire(1.5), _expire(30 * 86400)) == (1, 1, 2, 30 * 86400)
    assert _expire(40 * 86400) == 1_700_000_000 + 40 * 86400


# -------------------------------------------------------------------------- registry
def test_register_cache_and_clobber_rule(clean_registry: None) -> None:
    register_cache("dictcache", DictCache)
    assert "dictcache" in schemes()
    c = open_cache("dictcache://somewhere/x?namespace=reg&ttl=9")
    assert type(c) is DictCache and (c.location, c.namespace, c.ttl) == ("somewhere/x", "reg", 9.0)
    c.set("k", 1)
    assert open_cache("dictcache://?namespace=reg").get("k") == 1  # the full public API works

    with pytest.raises(ValueError, match="'dictcache' is already registered; pass clobber=True"):
        register_cache("dictcache", OtherDictCache)
    with pytest.raises(ValueError, match="'memory' is already registered"):
        register_cache("memory", DictCache)
    register_cache("dictcache", OtherDictCache, clobber=True)
    assert type(open_cache("dictcache://")) is OtherDictCache
    register_cache("memory", DictCache, clobber=True)  # a built-in can be replaced explicitly
    assert type(open_cache("memory://")) is DictCache


def test_register_cache_by_import_string(clean_registry: None) -> None:
    register_cache("mem2", "torchx_datapipes.cache.providers.memory:MemoryCache")
    assert type(open_cache("mem2://?max_items=3")) is MemoryCache


def test_entry_point_group(monkeypatch: pytest.MonkeyPatch, clean_registry: None) -> None:
    eps = [
        EntryPoint(
            name="epcache",
            value="torchx_datapipes.cache.providers.memory:MemoryCache",
            group=registry.ENTRY_POINT_GROUP,
        ),
        EntryPoint(name="elsewhere", value="json:dumps", group="other.group"),
    ]
    assert registry.ENTRY_POINT_GROUP == "torchx_datapipes.cache"

    def fake_entry_points() -> List[EntryPoint]:
        return eps

    monkeypatch.setattr(plugins, "entry_points", fake_entry_points)
    assert "epcache" in schemes()
    c = open_cache("epcache://?namespace=ep&max_items=5")
    assert type(c) is MemoryCache and (c.namespace, c.max_items) == ("ep", 5)
    with pytest.raises(ValueError, match="'epcache' is already registered"):
        register_cache("epcache", DictCache)
    register_cache("epcache", DictCache, clobber=True)  # code beats entry points
    assert type(open_cache("epcache://")) is DictCache


# --------------------------------------------------------------------- lazy imports
def test_import_and_open_do_not_import_clients_or_torch(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import torchx_datapipes, torchx_datapipes.cache
        from torchx_datapipes.cache import open_cache
        heavy = ("redis", "pymemcache", "torch")
        c = open_cache("memory://")
        c.set("k", b"v"); assert c.get("k") == b"v"
        s = open_cache("sqlite://{tmp_path}/lazy.db")
        s.set("k", [1, 2]); assert s.get("k") == [1, 2]
        print(sorted(m for m in heavy if m in sys.modules))
        open_cache("redis://127.0.0.1:1/0")
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PACKAGE_ROOT}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[]", "['redis']"]  # redis only once a redis URL is opened


def test_holders_register_when_torch_is_loaded_and_load_lazily_otherwise() -> None:
    code = textwrap.dedent(
        """
        import sys
        import torch
        from torch.utils.data.datapipes.map import SequenceWrapper
        import torchx_datapipes.cache
        dp = SequenceWrapper([10, 20]).kv_cache("memory://")   # registered: torch came first
        print(dp[1], SequenceWrapper([3]).in_memory_cache()[0])
        """
    )
    lazy = textwrap.dedent(
        """
        import sys
        from torchx_datapipes.cache import open_cache
        print("torch" in sys.modules)
        from torchx_datapipes.cache import CachedDataset, KVCacheHolderMapDataPipe
        print("torch" in sys.modules, CachedDataset.__module__)
        """
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": PACKAGE_ROOT}
    for src, expected in ((code, ["20 3"]), (lazy, ["False", "True torchx_datapipes.cache.holders.dataset"])):
        proc = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == expected


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:6379/0?max_items=3", "memory://?lock_timeout=2", "memcached://h:1?mmap_bytes=0"],
)
def test_an_option_of_another_provider_is_named(url: str) -> None:
    option = url.split("?")[1].split("=")[0]
    with pytest.raises(ValueError, match=f"{option} do not apply to .*valid: .*namespace"):
        open_cache(url)


class MinimalCache(DictCache):
    """A third-party core written loosely: answers in key order, ``_set_many`` without ttl."""

    scheme = "minimal"
    store: Dict[str, bytes] = {}

    def _get_many(self, keys: List[str]) -> List[Optional[bytes]]:  # type: ignore[override]
        return [self.store.get(k) for k in keys]

    def _set_many(self, items: Dict[str, bytes]) -> None:  # type: ignore[override]
        self.store.update(items)


def test_a_loosely_written_third_party_core_works(clean_registry: None) -> None:
    register_cache("minimal", MinimalCache)
    c = open_cache("minimal://?namespace=third&strict=true")
    assert c.set_many({"a": 1, "b": [2]}) == 2
    assert c.get_many(["a", "b", "c"]) == {"a": 1, "b": [2]} and "a" in c
    c.delete("a")
    c.clear()
    assert c.get_many(["a", "b"]) == {} and c.stats().errors == 0


def test_stats_read_as_attributes_or_items() -> None:
    from torchx_datapipes.cache import open_cache

    c = open_cache("memory://")
    c.set("k", b"x" * 10)
    c.get("k")
    c.get("missing")
    st = c.stats()
    assert (st["hits"], st["misses"], st.errors, st["bytes"]) == (1, 1, 0, st.bytes_read + st.bytes_written)
    with pytest.raises(KeyError, match="hits"):
        st["nope"]


@pytest.mark.parametrize(
    "module, url, extra",
    [
        ("redis", "redis://127.0.0.1:6379/0", "redis"),
        ("pymemcache", "memcached://127.0.0.1:11211", "memcached"),
    ],
)
def test_missing_extra_gives_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, module: str, url: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # "not installed"
    with pytest.raises(
        ImportError, match=f"needs the '{module}' package: pip install 'torchx-datapipes\\[{extra}\\]'"
    ):
        open_cache(url)
