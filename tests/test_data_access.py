"""Map-style access, the torchdata node, pickling into workers, read-ahead shutdown, caching, s3."""

import gc
import itertools
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, List

import fsspec
import pytest
from data_testutil import ids, split_output, transform_output
from pickle_safety import PACKAGE_ROOT, assert_pickle_safe
from s3_fixture import S3Server
from torch.utils.data import DataLoader
from torchdata.nodes import Batcher, Loader

from torchx_datapipes.data import OutputDataset, OutputMapDataset, _prefetch, merge_states
from torchx_datapipes.formats import chunks as _formats
from torchx_datapipes.formats import registry as _registry
from torchx_datapipes.formats.parquet import reader as _parquet
from torchx_datapipes.io import partfiles as _files

N = 157


@pytest.fixture(scope="module")
def outs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("a")
    return {
        fmt: transform_output(root / fmt, [60, 50, 47], fmt) for fmt in ("jsonl", "parquet", "webdataset")
    }


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    opened: List[str] = []
    real = _files.open_part
    monkeypatch.setattr(_files, "open_part", lambda part, *a: opened.append(part.path) or real(part, *a))
    return opened


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "webdataset"])
def test_map_style_getitem_getitems_one_read_per_part(outs: dict, fmt: str, monkeypatch: Any) -> None:
    ds = OutputDataset.map_style(outs[fmt])
    assert isinstance(ds, OutputMapDataset) and len(ds) == N
    assert ds[0]["id"] == 0 and ds[59]["id"] == 59 and ds[60]["id"] == 60 and ds[-1]["id"] == N - 1
    for i in (0, 70, 120):
        ds[i]  # builds each part's offset index (JSON Lines, tar) once per process
    _parquet._RG_CACHE.clear()  # Parquet row groups read before
    _formats._PART_BYTES.clear()  # bytes kept from building the offset indexes
    opened = _count_opens(monkeypatch)
    want = [150, 3, 61, 62, 3, 0, 119, 64, 110]  # three parts, unordered, a duplicate
    assert ids(ds.__getitems__(want)) == want
    assert len(opened) == 3 and len(set(opened)) == 3  # one read per part
    with pytest.raises(IndexError, match=f"index {N} is out of range.*{N} records"):
        ds[N]
    _parquet._RG_CACHE.clear()
    opened.clear()
    batches = [b["id"].tolist() for b in DataLoader(ds, batch_size=20, shuffle=False)]
    assert [i for b in batches for i in b] == list(range(N))
    if fmt == "parquet":  # in-order batches: each row group read once (a per-process LRU)
        assert len(opened) == 3


def test_map_style_columns_and_split(tmp_path: Path) -> None:
    out = split_output(tmp_path, [30, 20], "parquet")
    train = OutputDataset.map_style(out, "train", columns=["id"])
    assert len(train) == OutputDataset(out, "train").num_records
    assert set(train[0]) == {"id"}


def _node_ds(out: str, rank: int) -> OutputDataset:
    return OutputDataset(out, shuffle=True, seed=1, shuffle_window=32, rank=rank, world_size=2)


def test_node_with_loader_and_its_state(outs: dict) -> None:
    ds = _node_ds(outs["parquet"], 1)
    full = [int(r["id"]) for r in Loader(ds.node())]
    assert full == ids(list(ds)) and len(full) == len(ds)
    loader = Loader(Batcher(_node_ds(outs["parquet"], 1).node(), batch_size=6, drop_last=False))
    it = iter(loader)
    first = [int(r["id"]) for _ in range(4) for r in next(it)]
    state = loader.state_dict()
    again = Loader(Batcher(_node_ds(outs["parquet"], 1).node(), batch_size=6, drop_last=False))
    again.load_state_dict(state)
    rest = [int(r["id"]) for b in again for r in b]
    assert first + rest == full
    other = Loader(_node_ds(outs["parquet"], 0).node())  # rank 0 took 5 records
    it0 = iter(other)
    first0 = [int(next(it0)["id"]) for _ in range(5)]
    merged = merge_states([state, other.state_dict()])  # the node's state inside the Loader's
    ds1 = OutputDataset(outs["parquet"], shuffle=True, seed=1, shuffle_window=32)  # on one rank
    ds1.load_state_dict(merged)
    left = ids(list(ds1))
    assert sorted(first + first0 + left) == list(range(N))


def test_pickle_safe_in_fresh_interpreters(outs: dict) -> None:
    ds = OutputDataset(outs["webdataset"], shuffle=True, seed=2, shuffle_window=16)
    assert_pickle_safe(ds, check="[int(r['id']) for r in x][:9]")
    mapped = pickle.loads(pickle.dumps(ds.map_style(outs["jsonl"])))  # fresh interpreters: above
    assert [mapped[i]["id"] for i in (0, 100, 156)] == [0, 100, 156]


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawned_and_forkserver_workers(outs: dict, context: str) -> None:
    ds = OutputDataset(outs["parquet"], shuffle=True, rank=0, world_size=2)
    loader = DataLoader(ds, batch_size=10, num_workers=1, multiprocessing_context=context)
    assert sorted(i for b in loader for i in b["id"].tolist()) == sorted(ids(list(ds)))


def _read_ahead_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == _prefetch.THREAD_NAME]


def test_read_ahead_thread_stops_after_an_early_break(tmp_path: Path) -> None:
    """An abandoned iterator's job stops and its pooled thread is reused (pooled threads never exit:
    a thread exiting in a forked worker crashed Arrow's jemalloc, see ``data/_prefetch.py``)."""
    out = transform_output(tmp_path, [5000, 4000], "jsonl")  # several chunks
    ds = OutputDataset(out, read_ahead=1)
    gc.collect()  # iterators other tests abandoned stop their jobs when collected
    busy = set(_prefetch._LIVE)
    it = iter(ds)
    assert next(it)["id"] == 0
    (worker,) = set(_prefetch._LIVE) - busy
    del it
    gc.collect()
    deadline = time.monotonic() + 10
    while worker not in _prefetch._IDLE and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker in _prefetch._IDLE and worker.idle.is_set() and worker not in _prefetch._LIVE
    threads = set(_read_ahead_threads())
    assert [r["id"] for r in itertools.islice(iter(ds), 3)] == [0, 1, 2]  # a pooled thread, no new one
    assert set(_read_ahead_threads()) == threads and worker.thread.is_alive()
    code = (
        "from torchx_datapipes.data import OutputDataset\n"
        f"it = iter(OutputDataset({out!r}, read_ahead=2))\n"
        "print(next(it)['id'])\n"  # exits with the iterator and its thread still alive
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": PACKAGE_ROOT, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "0", proc.stderr


def test_read_ahead_error_is_raised_in_the_consumer(outs: dict, monkeypatch: Any) -> None:
    def broken(*a: Any) -> Any:
        raise OSError("disk on fire")

    monkeypatch.setattr(_files, "open_part", broken)
    with pytest.raises(OSError, match="disk on fire"):
        list(OutputDataset(outs["parquet"], read_ahead=2))


def test_cache_dir_copies_each_part_once(outs: dict, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ds = OutputDataset(outs["jsonl"], cache_dir=str(cache))
    assert ids(list(ds)) == list(range(N))
    copies = sorted(p.name for p in cache.rglob("part-*"))
    assert copies == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    assert not list(cache.rglob("*.tmp-*"))


def test_s3_on_moto(outs: dict, s3_server: S3Server, tmp_path: Path) -> None:
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    for fmt in ("parquet", "webdataset"):
        fs.put(outs[fmt], s3_server.url(f"reader/{fmt}"), recursive=True)
        url = s3_server.url(f"reader/{fmt}")
        ds = OutputDataset(url, shuffle=True, storage_options=s3_server.storage_options)
        assert sorted(ids(list(ds))) == list(range(N))
        cached = OutputDataset(url, cache_dir=str(tmp_path / fmt))
        assert ids(list(cached)) == list(range(N))
        assert ids(OutputDataset.map_style(url).__getitems__([5, 100])) == [5, 100]
    loader = DataLoader(OutputDataset(s3_server.url("reader/parquet"), rank=1, world_size=2), num_workers=2)
    assert sorted(int(b["id"]) for b in loader) == list(range(79, N))  # forked workers reach s3 too
    with pytest.raises(FileNotFoundError, match="has not committed"):
        OutputDataset(s3_server.url("reader/nothing"))


@pytest.mark.parametrize("fmt", ["jsonl", "webdataset"])
def test_parts_above_the_memory_limit_are_indexed_in_blocks(
    outs: dict, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _registry.clear_caches()
    monkeypatch.setattr(_formats, "PART_BYTES_LIMIT", 1000)  # every part is "large"
    monkeypatch.setattr(_formats, "INDEX_BLOCK", 777)  # lines and members straddle blocks
    opened = _count_opens(monkeypatch)
    assert ids(list(OutputDataset(outs[fmt], shuffle=True, shuffle_window=40))) != list(range(N))
    assert sorted(ids(list(OutputDataset(outs[fmt], shuffle=True)))) == list(range(N))
    assert not _formats._PART_BYTES and len(opened) > 3  # chunks read from the parts again
    _registry.clear_caches()
