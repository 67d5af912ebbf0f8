"""A sqlite cache open in a parent is not carried across ``fork()`` (SQLite corrupts its lock and
shared-memory state in the child: "disk I/O error"; ``test_cache_holders`` hit it once)."""

import multiprocessing as mp
import os
from pathlib import Path
from typing import Any, List

from torchx_datapipes.cache import open_cache


def _open_files(tmp_path: Path) -> List[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(tmp_path)):
            out.append(target)
    return sorted(out)


def test_a_dropped_cache_closes_its_file_at_once(tmp_path: Path) -> None:
    # Python 3.11's sqlite3.Connection is in a reference cycle: without the cache's __del__ the
    # file stayed open until the garbage collector ran
    open_cache(f"sqlite://{tmp_path}/c.db").clear()
    assert _open_files(tmp_path) == []


def _child(url: str, worker: int, q: Any) -> None:
    try:
        cache = open_cache(url)
        for i in range(200):
            cache.set(f"w{worker}-{i}", i)
        got = [cache.get(f"w{worker}-{i}") for i in range(200)]
        q.put("ok" if got == list(range(200)) and cache.get("parent") == "p" else f"bad values {got[:5]}")
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        q.put(f"{type(e).__name__}: {e}")


def test_forked_children_of_a_parent_holding_the_cache_open_write_safely(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/c.db"
    cache = open_cache(url)
    cache.set("parent", "p")  # the parent's connection is open (WAL) ...
    assert any(p.endswith("c.db-shm") for p in _open_files(tmp_path))
    ctx = mp.get_context("fork")
    q: Any = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(url, w, q)) for w in range(3)]
    for p in procs:
        p.start()  # ... and closed before each fork
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results == ["ok"] * 3
    assert cache.get("parent") == "p" and cache.get("w2-199") == 199  # the parent reopens on use
