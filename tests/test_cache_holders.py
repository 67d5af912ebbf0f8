"""Unit tests of the cache holders: CachedDataset, kv_cache / in_memory_cache, CachedMapper."""

import copy
import functools
import importlib
import io
import logging
import os
import pickle
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest
import torch
from cache_holder_testutil import (
    BatchCountingDataset,
    CallLog,
    CountingDataset,
    CountingMapDataPipe,
    LoggedFn,
    cache_url,
    spy_get_many,
    unique_namespace,
    value,
)
from pickle_safety import assert_pickle_safe
from torch.utils.data import DataLoader, IterableDataset, MapDataPipe
from torchdata.nodes import IterableWrapper, Loader

from torchx_datapipes.cache import Cache, open_cache
from torchx_datapipes.cache.holders import (
    CachedDataset,
    CachedFunction,
    CachedMapper,
    InMemoryCacheHolderMapDataPipe,
    KVCacheHolderMapDataPipe,
)
from torchx_datapipes.cache.holders import datapipe as datapipe_module
from torchx_datapipes.cache.providers.memory import MemoryCache


@pytest.fixture(params=["memory", "sqlite"])
def cache(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cache]:
    c = open_cache(cache_url(request.param, tmp_path, unique_namespace()))
    yield c
    c.close()


@pytest.fixture
def log(tmp_path: Path) -> CallLog:
    return CallLog(tmp_path / "calls.log")


def same(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    return a["i"] == b["i"] and a["s"] == b["s"] and torch.equal(a["x"], b["x"])


def all_same(got: List[Dict[str, Any]], indices: List[int]) -> bool:
    return len(got) == len(indices) and all(same(g, value(i)) for g, i in zip(got, indices))


# ------------------------------------------------------------------------------ CachedDataset
def test_dataset_serves_values_and_reads_each_index_once(cache: Cache, log: CallLog) -> None:
    ds = CachedDataset(CountingDataset(10, log.path), cache)
    for _ in range(3):
        assert all_same([ds[i] for i in range(10)], list(range(10)))
    assert len(ds) == 10
    assert log.indices() == list(range(10))
    stats = cache.stats()
    assert (stats.misses, stats.hits, stats.sets) == (10, 20, 10)


def test_dataset_getitems_is_one_round_trip_and_reads_only_misses(cache: Cache, log: CallLog) -> None:
    ds = CachedDataset(BatchCountingDataset(16, log.path), cache)
    gets = spy_get_many(cache)
    assert all_same(ds.__getitems__(list(range(8))), list(range(8)))
    assert all_same(ds.__getitems__(list(range(4, 12))), list(range(4, 12)))
    assert all_same(ds.__getitems__([11, 0, 5, 0]), [11, 0, 5, 0])
    assert [len(keys) for keys in gets] == [8, 8, 3]  # one backend get per batch, duplicates once
    # misses read with the source's own __getitems__, only the missing indices
    assert [what for _, what in log.calls()] == ["batch:0,1,2,3,4,5,6,7", "batch:8,9,10,11"]
    assert cache.stats().sets == 12


def test_dataset_getitems_reads_misses_one_by_one_without_source_getitems(cache: Cache, log: CallLog) -> None:
    ds = CachedDataset(CountingDataset(8, log.path), cache)
    ds[2]
    assert all_same(ds.__getitems__([1, 2, 3]), [1, 2, 3])
    assert log.indices() == [1, 2, 3]


def test_dataloader_fetches_a_batch_with_one_get(cache: Cache, log: CallLog) -> None:
    ds = CachedDataset(CountingDataset(12, log.path), cache)
    gets = spy_get_many(cache)
    for _ in range(2):
        batches = list(DataLoader(ds, batch_size=4))
        assert torch.cat([b["i"] for b in batches]).tolist() == list(range(12))
    assert [len(keys) for keys in gets] == [4] * 6
    assert log.indices() == list(range(12))


def test_dataset_key_fn_maps_indices_to_keys(cache: Cache, log: CallLog) -> None:
    ds = CachedDataset(CountingDataset(9, log.path), cache, key_fn=lambda i: ("mod3", i % 3))
    assert all_same([ds[i] for i in range(6)], [0, 1, 2, 0, 1, 2])
    assert all_same(ds.__getitems__([8, 7, 6]), [2, 1, 0])
    assert log.indices() == [0, 1, 2]
    assert cache.get(("mod3", 1)) is not None and cache.get(4) is None


def test_dataset_default_key_takes_integer_likes_and_explains_bad_ones(cache: Cache, log: CallLog) -> None:
    ds = CachedDataset(CountingDataset(5, log.path), cache)
    assert same(ds[np.int64(3)], value(3)) and same(ds[torch.tensor(3)], value(3)) and same(ds[3], value(3))
    assert log.indices() == [3]
    with pytest.raises(TypeError, match="key_fn="):
        ds[[1, 2]]  # type: ignore[index]


def test_dataset_delegates_attributes_and_pickles_configuration_only(tmp_path: Path, log: CallLog) -> None:
    url = cache_url("sqlite", tmp_path, "delegation")
    ds = CachedDataset(CountingDataset(4, log.path, name="mnist"), url)
    assert ds.name == "mnist" and ds.describe() == "mnist[4]" and ds.n == 4
    with pytest.raises(AttributeError, match="nope"):
        ds.nope  # noqa: B018
    ds[1]  # opens the sqlite connection, which cannot be pickled
    assert set(ds.__getstate__()) == {"dataset", "cache", "key_fn"}
    clone = pickle.loads(pickle.dumps(ds))
    assert type(clone) is CachedDataset and clone.name == "mnist"
    assert same(clone[1], value(1)) and log.indices() == [1]  # served from the shared file
    assert same(copy.deepcopy(ds)[1], value(1)) and same(copy.copy(ds)[1], value(1))
    empty = CachedDataset.__new__(CachedDataset)  # as during unpickling: no __dict__ yet
    for name in ("dataset", "cache", "name", "__deepcopy__", "__reduce_cython__"):
        with pytest.raises(AttributeError):  # and no RecursionError
            getattr(empty, name)
    ds.dataset.__fspath__ = lambda: "/x"  # dunders are never delegated (protocol probes)
    assert not hasattr(ds, "__fspath__")


def test_dataset_rejects_iterable_datasets() -> None:
    class Stream(IterableDataset):
        def __iter__(self) -> Iterator[int]:
            return iter(range(3))

    with pytest.raises(TypeError, match="CachedMapper"):
        CachedDataset(Stream(), "memory://")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cache URL"):
        CachedDataset(CountingDataset(1, "/dev/null"), 42)  # type: ignore[arg-type]


def test_dataset_backend_failure_is_a_miss_not_an_error(log: CallLog) -> None:
    ds = CachedDataset(CountingDataset(4, log.path), "redis://127.0.0.1:1/0?timeout=0.2")
    for _ in range(2):
        assert all_same([ds[i] for i in range(4)], list(range(4)))
        assert all_same(ds.__getitems__([0, 1]), [0, 1])
    assert log.indices() == sorted([0, 0, 1, 1, 2, 3] * 2)
    assert ds.cache.stats().errors >= 1 and ds.cache.breaker_state == "open"


# ----------------------------------------------------------------- kv_cache / in_memory_cache
def test_kv_cache_functional_form(cache: Cache, log: CallLog) -> None:
    assert {"kv_cache", "in_memory_cache"} <= set(MapDataPipe.functions)
    dp = CountingMapDataPipe(6, log.path).kv_cache(cache)
    assert type(dp) is KVCacheHolderMapDataPipe and dp.cache is cache and len(dp) == 6
    for _ in range(2):
        assert all_same([dp[i] for i in range(6)], list(range(6)))
    assert log.indices() == list(range(6))
    assert isinstance(dp, MapDataPipe)  # chains further: the functional forms work on it
    assert type(dp.in_memory_cache()) is InMemoryCacheHolderMapDataPipe


def test_kv_cache_accepts_a_url_and_a_key_fn(tmp_path: Path, log: CallLog) -> None:
    url = cache_url("sqlite", tmp_path, "kv")
    dp = CountingMapDataPipe(6, log.path).kv_cache(url, key_fn=lambda i: f"k{i // 2}")
    assert dp.cache.describe() == f"sqlite://{tmp_path / 'cache.db'}"
    assert all_same([dp[i] for i in range(6)], [0, 0, 2, 2, 4, 4])
    assert log.indices() == [0, 2, 4]
    assert open_cache(url).get("k1") is not None  # another Cache object on the same file sees it


def test_kv_cache_getitems_is_one_round_trip(cache: Cache, log: CallLog) -> None:
    dp = KVCacheHolderMapDataPipe(CountingMapDataPipe(10, log.path), cache)
    gets = spy_get_many(cache)
    dp[3]
    assert all_same(dp.__getitems__([2, 3, 4, 5]), [2, 3, 4, 5])
    assert all_same(dp.__getitems__([5, 4, 3, 2]), [5, 4, 3, 2])
    assert [len(keys) for keys in gets] == [1, 4, 4]
    assert log.indices() == [2, 3, 4, 5]


def test_in_memory_cache_is_an_honestly_bounded_lru(log: CallLog) -> None:
    dp = CountingMapDataPipe(5, log.path).in_memory_cache(max_items=2)
    assert type(dp) is InMemoryCacheHolderMapDataPipe and isinstance(dp.cache, MemoryCache)
    assert all_same([dp[0], dp[1], dp[0], dp[2]], [0, 1, 0, 2])  # 2 evicts 1, the least recently used
    assert len(dp.cache) == 2  # type: ignore[arg-type]
    assert all_same([dp[0], dp[2], dp[1]], [0, 2, 1])
    assert log.indices() == [0, 1, 1, 2]
    assert CountingMapDataPipe(5, log.path).in_memory_cache(max_bytes=1 << 20).cache.max_bytes == 1 << 20


def test_in_memory_cache_without_arguments_is_unbounded_and_returns_copies(log: CallLog) -> None:
    dp = CountingMapDataPipe(50, log.path).in_memory_cache()
    assert all_same([dp[i] for i in range(50)] + [dp[i] for i in range(50)], list(range(50)) * 2)
    dp[7]["x"].zero_()  # mutating a returned value never changes the cached one
    assert same(dp[7], value(7))
    assert log.indices() == list(range(50))


# ------------------------------------------------------------------------------- registration
def test_registration_is_idempotent_under_reload(log: CallLog) -> None:
    saved_module = dict(datapipe_module.__dict__)
    saved_functions = dict(MapDataPipe.functions)
    try:
        importlib.reload(datapipe_module)
        importlib.reload(datapipe_module)
        dp = CountingMapDataPipe(3, log.path).kv_cache("memory://")
        assert type(dp) is datapipe_module.KVCacheHolderMapDataPipe  # the newest class, not a stale one
        assert type(dp) is not saved_module["KVCacheHolderMapDataPipe"]
        assert all_same([dp[i] for i in range(3)] * 2, [0, 1, 2] * 2) and log.indices() == [0, 1, 2]
        assert type(dp.in_memory_cache()) is datapipe_module.InMemoryCacheHolderMapDataPipe
    finally:
        datapipe_module.__dict__.clear()
        datapipe_module.__dict__.update(saved_module)
        MapDataPipe.functions.clear()
        MapDataPipe.functions.update(saved_functions)


def test_registration_by_a_torch_package_copy_neither_raises_nor_displaces() -> None:
    from torch.package import PackageExporter, PackageImporter

    name = datapipe_module.__name__
    buf = io.BytesIO()
    with PackageExporter(buf) as exporter:
        exporter.intern(name)
        exporter.extern("**")
        exporter.save_module(name)
    before = dict(MapDataPipe.functions)
    for _ in range(2):  # each importer re-executes the module's source
        packaged = PackageImporter(io.BytesIO(buf.getvalue())).import_module(name)
        assert packaged.KVCacheHolderMapDataPipe is not KVCacheHolderMapDataPipe
    assert MapDataPipe.functions == before
    assert type(CountingMapDataPipe(1, "/dev/null").kv_cache("memory://")) is KVCacheHolderMapDataPipe


def test_registration_leaves_another_librarys_function_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Foreign(MapDataPipe):
        def __init__(self, source: Any) -> None:
            self.source = source

    foreign = functools.partial(lambda cls, dp: cls(dp), Foreign)
    monkeypatch.setitem(MapDataPipe.functions, "in_memory_cache", foreign)
    with caplog.at_level(logging.WARNING, logger="torchx_datapipes.cache"):
        datapipe_module.register_functional("in_memory_cache", InMemoryCacheHolderMapDataPipe)
    assert MapDataPipe.functions["in_memory_cache"] is foreign
    assert "already registered" in caplog.text


# ------------------------------------------------------------------------------------ nodes
def test_cached_function_default_key_key_fn_and_batches(cache: Cache, log: CallLog) -> None:
    fn = CachedFunction(LoggedFn(log.path), cache)
    assert [fn(x) for x in (3, 4, 3)] == [10, 17, 10]
    gets = spy_get_many(cache)
    assert fn.map_batch([4, 5, 6, 5]) == [17, 26, 37, 26]
    assert len(gets) == 1 and log.indices() == [3, 4, 5, 6]
    with pytest.raises(TypeError, match=r"pass key_fn=|Pass key_fn="):
        fn({"id": 3})  # type: ignore[arg-type]
    by_id = CachedFunction(lambda d: d["id"] * 2, cache, key_fn=lambda d: ("id", d["id"]))
    assert by_id({"id": 21}) == 42 and cache.get(("id", 21)) == 42


def _expected(n: int) -> List[int]:
    return [x * x + 1 for x in range(n)]


def test_cached_mapper_under_a_loader_computes_each_item_once(cache: Cache, log: CallLog) -> None:
    node = CachedMapper(IterableWrapper(range(20)), LoggedFn(log.path), cache)
    loader = Loader(node)
    for _ in range(3):
        assert list(loader) == _expected(20)
    assert log.indices() == list(range(20))
    assert node.cache is cache


def resume_midway(make_loader: Any) -> List[int]:
    """Read 7 items, checkpoint, resume a new loader from the state: all items, in order."""
    first = make_loader()
    it = iter(first)
    head = [next(it) for _ in range(7)]
    state = first.state_dict()
    del it, first
    resumed = make_loader()
    resumed.load_state_dict(state)
    return head + list(resumed)


@pytest.mark.parametrize("options", [{}, {"prebatch": 4}], ids=["inline", "prebatch"])
def test_cached_mapper_state_dict_resumes(options: Dict[str, Any], cache: Cache, log: CallLog) -> None:
    def make_loader() -> Loader:
        return Loader(CachedMapper(IterableWrapper(range(20)), LoggedFn(log.path), cache, **options))

    gets = spy_get_many(cache)
    assert resume_midway(make_loader) == _expected(20)
    assert list(make_loader()) == _expected(20)
    assert log.indices() == list(range(20))  # resuming recomputed nothing: the cache had it
    if options:
        assert all(len(keys) <= 4 for keys in gets) and len(gets) < 20  # one get per prebatch


@pytest.mark.parametrize("backend", ["memory", "sqlite", "redis", "memcached"])
def test_cached_mapper_thread_workers(backend: str, tmp_path: Path, log: CallLog) -> None:
    # not strict: a backend failure in a worker thread is a miss, which the last assert catches
    cache = open_cache(cache_url(backend, tmp_path, unique_namespace()), strict=False)
    cache.clear()

    def make_loader() -> Loader:
        return Loader(CachedMapper(IterableWrapper(range(20)), LoggedFn(log.path), cache, num_workers=2))

    try:
        assert resume_midway(make_loader) == _expected(20)
        # items in flight when the first loader was dropped may have been computed twice
        assert set(log.indices()) == set(range(20))
        before = len(log.calls())
        assert list(make_loader()) == _expected(20)
        assert len(log.calls()) == before  # a whole epoch served from the cache
    finally:
        cache.clear()


def test_cached_mapper_process_workers_share_a_sqlite_cache(tmp_path: Path, log: CallLog) -> None:
    url = cache_url("sqlite", tmp_path, "procs")
    open_cache(url).clear()  # created by the parent (see test_cache_sharing)
    node = CachedMapper(
        IterableWrapper(range(24)),
        LoggedFn(log.path),
        url,
        num_workers=2,
        method="process",
        multiprocessing_context="fork",
    )
    loader = Loader(node)
    assert list(loader) == _expected(24)
    assert list(loader) == _expected(24)
    assert log.indices() == list(range(24))
    assert os.getpid() not in {pid for pid, _ in log.calls()}  # computed in the workers


def test_cached_mapper_rejects_a_bad_prebatch() -> None:
    with pytest.raises(ValueError, match="prebatch"):
        CachedMapper(IterableWrapper(range(3)), abs, "memory://", prebatch=0)


# ----------------------------------------------------------------------------- pickle safety
SOURCES = {
    "CachedDataset": """
import os
from torch.utils.data import Dataset
from torchx_datapipes.cache.holders import CachedDataset

class Source(Dataset):
    name = "pids"
    def __getitem__(self, i):
        return {{"i": i, "pid": os.getpid()}}
    def __len__(self):
        return 6

def make():
    ds = CachedDataset(Source(), "sqlite://{db}?namespace=ds")
    [ds[i] for i in range(6)]  # cached values carry this (the parent) process's pid
    return ds
""",
    "KVCacheHolderMapDataPipe": """
import os
from torch.utils.data import MapDataPipe
import torchx_datapipes.cache.holders

class Source(MapDataPipe):
    def __getitem__(self, i):
        return {{"i": i, "pid": os.getpid()}}
    def __len__(self):
        return 6

def make():
    dp = Source().kv_cache("sqlite://{db}?namespace=kv", key_fn=str)
    [dp[i] for i in range(6)]
    return dp
""",
    "InMemoryCacheHolderMapDataPipe": """
from torch.utils.data import MapDataPipe
import torchx_datapipes.cache.holders

class Source(MapDataPipe):
    def __getitem__(self, i):
        return (i, i * i)
    def __len__(self):
        return 6

def make():
    dp = Source().in_memory_cache(max_items=4)
    [dp[i] for i in range(6)]
    return dp
""",
    "CachedFunction": """
import os
from torchx_datapipes.cache.holders import CachedFunction

def work(x):
    return (x, os.getpid())

def make():
    fn = CachedFunction(work, "sqlite://{db}?namespace=fn")
    [fn(i) for i in range(4)]
    return fn
""",
}
CHECKS = {
    # values come from the parent's pid: each child reads the shared sqlite file, never recomputes
    "CachedDataset": "(type(x).__name__, len(x), x.name, x.__getitems__([0, 1]), [x[i] for i in range(6)])",
    "KVCacheHolderMapDataPipe": "(len(x), x.__getitems__([4, 5]), [x[i] for i in range(6)],"
    " type(x.in_memory_cache()).__name__, x.cache.get('3'))",
    "InMemoryCacheHolderMapDataPipe": "(len(x), [x[i] for i in range(6)], type(x.cache).__name__,"
    " x.cache.max_items, len(x.cache), len(x.cache.get_many(range(6))))",
    "CachedFunction": "([x(i) for i in range(4)], x.map_batch([3, 2]), x.cache.namespace)",
}


@pytest.mark.parametrize("holder", list(SOURCES))
def test_holders_are_pickle_safe(holder: str, tmp_path: Path) -> None:
    source = SOURCES[holder].format(db=tmp_path / "cache.db")
    reports = assert_pickle_safe(
        source, check=CHECKS[holder], backends=("pickle", "cloudpickle", "torch.package")
    )
    assert all(r.type_qualname == holder for r in reports.values())
