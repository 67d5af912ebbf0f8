"""Benchmark: the cache providers' throughput, and worker memory with a shared cache.

usage (from the repo root; Redis and memcached must be up: ``make services``)::

    .venv/bin/python benchmarks/bench_cache.py --quick      # smoke test, smaller sizes (< 1 min)
    .venv/bin/python benchmarks/bench_cache.py              # the issue's sizes (~2.5 min)
    .venv/bin/python benchmarks/bench_cache.py --providers memory,sqlite --sqlite-dir tmp

Everything is measured in one run, references included, and printed as markdown tables:

1a. ``get_many`` of 50k 1 KiB ``bytes`` values (default ``tensor`` codec, batches of 1000):
    keys/s, best of ``--repeat`` passes over every key, per provider, against dict lookups of
    the materialised objects, a dict of pickled bytes + ``pickle.loads``, the codec alone, the
    key hashing alone, and the raw sqlite3 / redis-py / pymemcache clients on the same stored
    keys (no cache layer, no decoding: each provider's ceiling). ``set_many`` is timed once
    (the first fill). Every value is read back and compared.
1b. The same for 1 MiB float32 tensors (262,144 elements, batches of 16), with MB/s
    (1 MB = 1e6 bytes of tensor data). memcached's item limit is 1 MiB: the 1 MiB row shows
    what ``stats()`` says happened, and a second row uses the largest tensor under the limit.
1b'. 1b again after ``mallopt`` stops glibc from returning freed 1 MiB blocks to the kernel:
    with the defaults, the figures for 1 MiB values swing several-fold from run to run with
    the heap's layout (fresh pages are page-faulted in, or not); 1b' shows the copy cost alone.
2.  ``--workers`` processes (``spawn``: fresh interpreters, nothing shared with the parent but
    the read-only files of shared libraries) each read the whole working set
    (``--ws-items`` float32 tensors of ``--ws-kib`` KiB) through the cache, twice. On a miss a
    worker generates the tensor from its key (``torch.Generator`` seeded by the key) and stores
    it; every value read is hashed (blake2b over all its bytes) and checked against the
    parent's hash of the generator's output. Workers start each pass together (a barrier).
    Memory per worker: peak RSS is the kernel's ``VmHWM``; PSS and USS
    (= Private_Clean + Private_Dirty) are sampled from ``/proc/self/smaps_rollup`` after every
    batch, peak kept, and once more at the end while every worker is still alive. RSS counts
    shared pages in full in every process that maps them (sqlite's mmap of the database file,
    the shared libraries of torch); PSS divides them among the processes mapping them.
    The server side (Redis ``used_memory`` delta, memcached ``bytes`` delta, sqlite file size)
    is reported separately: the data lives somewhere.

Parts run in the order 1a, 1b, 2. torch runs with one thread in the parent and in the
workers, as in DataLoader workers. Network caches are opened with ``timeout=5`` (default
0.5 s) so that a loaded machine shows up as slow calls rather than as timeouts counted as
misses; errors are printed if any. Each run uses its own namespaces and files and removes
them afterwards.

Non-goals: no CPU pinning, no statistics beyond best-of-N; on a shared 2-core machine, run
twice and compare before trusting a difference below ~10%.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import multiprocessing as mp
import os
import pickle
import queue
import random
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, ensure_corpus, load_fn, write_json  # noqa: E402

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

    import torch

    from torchx_datapipes.cache import Cache

PROVIDERS = ("memory", "sqlite", "redis", "memcached")
PARTS = ("small", "tensor", "workers", "transform")
REDIS_TARGET_KEYS_S = 200_000
RSS_TARGET_RATIO = 3.0
NET_TIMEOUT_S = 5.0
GET_LOOP_KEYS = 10_000  # keys for the one-key-per-call loops (a GET loop is ~20x slower)
MB = 1e6
QUICK_NOTE = " (--quick: smaller sizes than the issue's, not a verdict)"


@dataclass(frozen=True)
class Sizes:
    small_keys: int
    small_value: int
    small_batch: int
    tensor_keys: int
    tensor_elems: int
    tensor_batch: int
    ws_items: int
    ws_elems: int
    ws_batch: int
    passes: int


# scripts/services.sh starts memcached with -m 1024, so 100k 1 KiB values, 128 1 MiB values and
# the 200 MiB working set fit (with -m 256 the parts evicted each other: the benchmark measuring itself).
FULL = Sizes(100_000, 1024, 1000, 128, 262_144, 16, 800, 65_536, 16, 2)
QUICK = Sizes(10_000, 1024, 1000, 32, 262_144, 16, 200, 65_536, 16, 2)


# ---------------------------------------------------------------------------------------------
# Values, checksums, memory readings (used by the parent and by the spawned workers)
# ---------------------------------------------------------------------------------------------


ARRAYS = ("torch", "numpy")


def make_value(array: str, seed: int, key: int, elems: int) -> Any:
    """The value of ``key`` as a torch tensor or, for workers that never import torch, a numpy array."""
    if array == "torch":
        return make_tensor(seed, key, elems)
    import numpy as np

    return np.random.default_rng(seed * 1_000_003 + key).random(elems, dtype=np.float32)


def make_tensor(seed: int, key: int, elems: int) -> torch.Tensor:
    """The value of ``key``: ``elems`` float32 in [0, 1) from a generator seeded by the key."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + key)
    return torch.rand(elems, generator=g)


def digest(t: Any) -> bytes:
    """blake2b over every byte of the tensor or array (reads the whole value)."""
    if hasattr(t, "numpy"):
        t = t.contiguous().numpy()
    import numpy as np

    return hashlib.blake2b(np.ascontiguousarray(t).data, digest_size=16).digest()


def smaps_rollup() -> dict[str, int]:
    """This process's ``/proc/self/smaps_rollup`` in kB (empty if the kernel lacks it)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return out


def mem_sample() -> dict[str, int]:
    """RSS, PSS and USS in kB (USS = Private_Clean + Private_Dirty)."""
    r = smaps_rollup()
    return {
        "rss": r.get("Rss", 0),
        "pss": r.get("Pss", 0),
        "uss": r.get("Private_Clean", 0) + r.get("Private_Dirty", 0),
    }


def vm_hwm_kb() -> int:
    """Peak RSS of this process so far, as the kernel tracks it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------------------------------------
# Part 2: the worker processes
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of one run does (pickled to the spawned processes)."""

    url: str  # "" = no cache: generate every value every time
    array: str  # "torch": torch tensors (the worker imports torch); "numpy": numpy arrays, no torch
    items: int
    elems: int
    batch: int
    passes: int
    workers: int
    seed: int
    digests: tuple[bytes, ...]
    barrier_timeout: float


def _worker_run(spec: WorkerSpec, idx: int, barrier: Barrier) -> dict[str, Any]:
    if spec.array == "torch":
        import torch

        torch.set_num_threads(1)  # 4 workers on 2 cores: no intra-op threads on top
    from torchx_datapipes.cache import open_cache

    cache = open_cache(spec.url) if spec.url else None
    if cache is not None:
        cache.get_many([-1])  # connect / open the file before the baseline reading (-1: never stored)
    after_import = mem_sample()
    peak = dict(after_import)
    start = idx * spec.items // spec.workers  # each worker starts at its own offset, then wraps
    order = [*range(start, spec.items), *range(start)]
    hits: list[int] = []
    seconds: list[float] = []
    ok = bad = 0
    barrier.wait(spec.barrier_timeout)
    for _ in range(spec.passes):
        t0, n_hit = time.perf_counter(), 0
        for i in range(0, spec.items, spec.batch):
            batch = order[i : i + spec.batch]
            found = cache.get_many(batch) if cache is not None else {}
            fresh: dict[int, Any] = {}
            for k in batch:
                t = found.get(k)
                if t is None:
                    t = fresh[k] = make_value(spec.array, spec.seed, k, spec.elems)
                else:
                    n_hit += 1
                if digest(t) == spec.digests[k]:
                    ok += 1
                else:
                    bad += 1
            if cache is not None and fresh:
                cache.set_many(fresh)
            del found, fresh, t
            now = mem_sample()
            peak = {m: max(peak[m], now[m]) for m in peak}
        seconds.append(time.perf_counter() - t0)
        hits.append(n_hit)
        barrier.wait(spec.barrier_timeout)
    final = mem_sample()  # every worker is alive here (between two barriers)
    hwm = vm_hwm_kb()
    barrier.wait(spec.barrier_timeout)
    return {
        "worker": idx,
        "hits": hits,
        "seconds": seconds,
        "ok": ok,
        "bad": bad,
        "after_import_kb": after_import,
        "peak_kb": {**peak, "rss": max(peak["rss"], hwm)},
        "final_kb": final,
        "stats": cache.stats().as_dict() if cache is not None else {},
    }


def _worker(spec: WorkerSpec, idx: int, barrier: Barrier, out: Queue[dict[str, Any]]) -> None:
    """Entry point of a spawned worker: one result dict on ``out``, or its traceback."""
    try:
        out.put(_worker_run(spec, idx, barrier))
    except BaseException:
        barrier.abort()
        out.put({"worker": idx, "error": traceback.format_exc()})


def run_workers(spec: WorkerSpec, timeout: float) -> list[dict[str, Any]]:
    """Start ``spec.workers`` spawned workers, wait for their results (raise if one failed)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(spec.workers)
    out: Queue[dict[str, Any]] = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(spec, i, barrier, out), name=f"bench-cache-w{i}")
        for i in range(spec.workers)
    ]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(results) < spec.workers:
            try:
                results.append(out.get(timeout=1.0))
                continue
            except queue.Empty:
                pass
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0].name} exited with {dead[0].exitcode}" if dead else f"timeout {timeout:g}s"
                raise RuntimeError(f"workers for {spec.url or 'no cache'} failed: {why}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():  # only our own, stuck, worker processes
                p.kill()
                p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"a worker failed ({spec.url or 'no cache'}):\n{errors[0]}")
    return sorted(results, key=lambda r: r["worker"])


# ---------------------------------------------------------------------------------------------
# Services, versions, server-side memory
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Env:
    """Where each provider lives for this run."""

    redis_url: str
    memcached: tuple[str, int]
    sqlite_dir: Path
    sqlite_fs: str

    def url(self, provider: str, namespace: str, db: str = "cache.db", extra: str = "") -> str:
        q = f"?namespace={namespace}{extra}"
        if provider == "memory":
            return "memory://" + q
        if provider == "sqlite":
            return f"sqlite://{self.sqlite_dir / db}" + q
        if provider == "redis":
            return self.redis_url + q + f"&timeout={NET_TIMEOUT_S:g}"
        host, port = self.memcached
        return f"memcached://{host}:{port}" + q + f"&timeout={NET_TIMEOUT_S:g}"


def _pkg_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


def redis_client(env: Env) -> Any:
    import redis

    return redis.Redis.from_url(env.redis_url, protocol=3, socket_timeout=NET_TIMEOUT_S)


def memcached_client(env: Env) -> Any:
    from pymemcache.client.base import Client

    return Client(env.memcached, connect_timeout=2, timeout=NET_TIMEOUT_S, no_delay=True)


def check_services(providers: Sequence[str], env: Env) -> dict[str, str]:
    """Server descriptions; exit with a hint when a selected server is unreachable."""
    info: dict[str, str] = {}
    for name in ("redis", "memcached"):
        if name not in providers:
            continue
        where = env.redis_url if name == "redis" else f"{env.memcached[0]}:{env.memcached[1]}"
        try:
            if name == "redis":
                c = redis_client(env)
                c.ping()
                v = c.info("server")["redis_version"]
                mm = c.info("memory").get("maxmemory", 0)
                info[name] = f"Redis {v} at {where} (maxmemory {mm or 'unlimited'})"
            else:
                c = memcached_client(env)
                s = c.stats()
                st = c.stats("settings")
                info[name] = (
                    f"memcached {s[b'version'].decode()} at {where} (-m {s[b'limit_maxbytes'] // 2**20} MiB,"
                    f" item_size_max {st[b'item_size_max'] // 1024} KiB)"
                )
            c.close()
        except Exception as e:
            others = ",".join(p for p in providers if p != name) or "memory,sqlite"
            sys.exit(
                f"bench_cache: {name} at {where} is unreachable ({type(e).__name__}: {e}).\n"
                f"Start Redis and memcached with `make services` (scripts/services.sh), or leave it out:"
                f" --providers {others}"
            )
    return info


def fs_type(path: Path) -> str:
    """The file system type of the mount holding ``path`` (from /proc/mounts)."""
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt = parts[1]
                if str(path).startswith(mnt.rstrip("/") + "/") or str(path) == mnt:
                    if len(mnt) >= len(best):
                        best, fstype = mnt, parts[2]
    except OSError:
        pass
    return fstype


def header(providers: Sequence[str], env: Env, servers: dict[str, str], sizes: Sizes) -> list[str]:
    import redis
    import torch

    try:
        import hiredis

        hi = f"hiredis {hiredis.__version__}, used by redis-py: {redis.utils.HIREDIS_AVAILABLE}"
    except ImportError:
        hi = "hiredis absent"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"# bench_cache {time.strftime('%Y-%m-%d %H:%M:%S')} cpus={os.cpu_count()} load avg={load}",
        f"# python {sys.version.split()[0]}, torch {torch.__version__}, redis-py {redis.__version__} ({hi}),"
        f" pymemcache {_pkg_version('pymemcache')}, sqlite {sqlite3.sqlite_version}",
        f"# providers: {', '.join(providers)}",
    ]
    lines += [f"# {v}" for v in servers.values()]
    if "sqlite" in providers:
        kind = "RAM: file pages count as shmem" if env.sqlite_fs == "tmpfs" else "disk + page cache"
        lines.append(f"# sqlite files in {env.sqlite_dir} ({env.sqlite_fs}, {kind})")
    lines.append(f"# sizes: {asdict(sizes)}; torch threads: {torch.get_num_threads()} (parent and workers)")
    return lines


def server_memory(provider: str, env: Env, sqlite_path: Optional[Path] = None) -> dict[str, int]:
    """The server-side counters whose change is reported for part 2."""
    if provider == "redis":
        c = redis_client(env)
        m = c.info("memory")
        c.close()
        return {"used_memory": int(m["used_memory"])}
    if provider == "memcached":
        c = memcached_client(env)
        s = c.stats()
        slabs = c.stats("slabs")
        out = {k: int(s[k.encode()]) for k in ("bytes", "evictions", "curr_items", "limit_maxbytes")}
        out["page_bytes"] = int(c.stats("settings")[b"item_size_max"])  # slab page size by default
        for k, v in slabs.items():  # b"37:chunk_size" -> "chunk:37", b"37:used_chunks" -> "used:37"
            cls, _, what = k.decode().partition(":")
            name = {"chunk_size": "chunk", "used_chunks": "used"}.get(what)
            if name:
                out[f"{name}:{cls}"] = int(v)
        c.close()
        return out
    if provider == "sqlite" and sqlite_path is not None:
        total = sum(
            p.stat().st_size
            for p in (sqlite_path, Path(f"{sqlite_path}-wal"), Path(f"{sqlite_path}-shm"))
            if p.exists()
        )
        return {"file_bytes": total}
    return {}


def describe_server(provider: str, before: dict[str, int], after: dict[str, int], fs: str, items: int) -> str:
    if provider == "redis":
        return f"Redis used_memory +{(after['used_memory'] - before['used_memory']) / MB:,.0f} MB"
    if provider == "memcached":
        growth = {k.split(":")[1]: after[k] - before.get(k, 0) for k in after if k.startswith("used:")}
        cls = max(growth, key=lambda c: growth[c]) if growth else None
        fit = ""
        if cls is not None and growth[cls] > 0:  # the slab class these items went to
            chunk, page = after[f"chunk:{cls}"], after["page_bytes"]
            per_page = max(1, page // chunk)
            fit = (
                f"; {chunk:,} B chunks, {per_page} per {page // 2**20} MiB page: {items} items need"
                f" {-(-items // per_page)} pages, the server has {after['limit_maxbytes'] // page} in all"
            )
        return (
            f"memcached bytes +{(after['bytes'] - before['bytes']) / MB:,.0f} MB,"
            f" evictions +{after['evictions'] - before['evictions']:,}{fit}"
        )
    if provider == "sqlite":
        return f"file {after.get('file_bytes', 0) / MB:,.0f} MB ({fs})"
    return "-"


# ---------------------------------------------------------------------------------------------
# Part 1: throughput
# ---------------------------------------------------------------------------------------------


@dataclass
class RateRow:
    """One line of a throughput table."""

    method: str
    keys: int  # keys asked for per timed pass
    value_bytes: int  # raw bytes of one value
    get_s: Optional[float] = None  # best seconds for one pass over the keys
    found: Optional[int] = None  # keys returned by the timed pass
    verified: str = ""
    set_s: Optional[float] = None
    set_keys: int = 0
    note: str = ""

    @property
    def get_rate(self) -> Optional[float]:
        return self.keys / self.get_s if self.get_s else None

    @property
    def set_rate(self) -> Optional[float]:
        return self.set_keys / self.set_s if self.set_s else None


_T0 = time.perf_counter()


def progress(msg: str) -> None:
    """A progress line (stdout, ``#``-prefixed) with the seconds since start."""
    print(f"# [{time.perf_counter() - _T0:5.1f}s] {msg}", flush=True)


def best_time(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    """The fastest of ``repeat`` calls of ``fn`` (seconds) and what the last call returned."""
    best, n = math.inf, 0
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


def batched(keys: Sequence[int], size: int) -> list[list[int]]:
    return [list(keys[i : i + size]) for i in range(0, len(keys), size)]


def stats_note(cache: Cache) -> str:
    s = cache.stats()
    bad = {k: v for k, v in s.as_dict().items() if k in ("errors", "bypassed", "oversize", "rejected") and v}
    return ", ".join(f"stats().{k}={v}" for k, v in bad.items())


def provider_rows(
    label: str,
    cache: Cache,
    batches: list[list[int]],
    source: dict[int, Any],
    same: Callable[[Any, Any], bool],
    value_bytes: int,
    repeat: int,
) -> RateRow:
    """set_many once (timed), get_many best of ``repeat``, then read back and compare every value."""
    n = sum(len(b) for b in batches)
    items = [{k: source[k] for k in b} for b in batches]
    t0 = time.perf_counter()
    stored = sum(cache.set_many(m) for m in items)
    set_s = time.perf_counter() - t0
    del items
    get_s, found = best_time(repeat, lambda: sum(len(cache.get_many(b)) for b in batches))
    ok = 0
    for b in batches:
        ok += sum(1 for k, v in cache.get_many(b).items() if same(v, source[k]))
    row = RateRow(label, n, value_bytes, get_s, found, f"{ok:,}/{n:,}", set_s if stored else None, n)
    notes = [f"stored {stored:,}/{n:,}"] if stored != n else []
    row.note = ", ".join([*notes, stats_note(cache)]).strip(", ")
    if found == 0:
        row.get_s = None  # nothing was read: a keys/s figure would be a miss rate, not a read rate
    elif found < n:
        row.note = ", ".join(x for x in (f"**only {found:,} found: not comparable**", row.note) if x)
    return row


def cleanup(cache: Cache, keys: Sequence[int]) -> None:
    """Remove what this run stored (memcached's clear() only invalidates, so delete first)."""
    if cache.scheme == "memcached":
        for b in batched(keys, 1000):
            cache.delete_many(b)
    cache.clear()
    cache.close()


def time_lookups(
    label: str, batches: list[list[int]], repeat: int, fn: Callable[[list[int]], Any], vb: int, note: str = ""
) -> RateRow:
    """A reference row: ``fn(batch)`` returns what was found for the batch (a sized collection)."""
    s, found = best_time(repeat, lambda: sum(len(fn(b)) for b in batches))
    return RateRow(label, sum(len(b) for b in batches), vb, s, found, note=note)


def pickle_ref(label: str, d: dict[int, Any], batches: list[list[int]], repeat: int, vb: int) -> RateRow:
    """A dict of ``pickle.dumps`` bytes, ``pickle.loads`` on every read."""
    pickled = {k: pickle.dumps(v, protocol=5) for k, v in d.items()}
    return time_lookups(label, batches, repeat, lambda b: {k: pickle.loads(pickled[k]) for k in b}, vb)


def codec_ref(label: str, d: dict[int, Any], batches: list[list[int]], repeat: int, vb: int) -> RateRow:
    """A dict of ``TensorCodec.encode`` bytes, decoded on every read: the codec alone."""
    from torchx_datapipes.cache import TensorCodec

    codec = TensorCodec()
    encoded = {k: codec.encode(v) for k, v in d.items()}
    return time_lookups(label, batches, repeat, lambda b: {k: codec.decode(encoded[k]) for k in b}, vb)


def redis_raw_rows(
    env: Env, cache: Cache, keys: list[int], skeys: list[list[str]], repeat: int, vb: int
) -> list[RateRow]:
    """The raw redis-py client on the keys the cache stored: MGET per batch, and GET loops."""
    r = redis_client(env)
    n = sum(len(b) for b in skeys)
    s, found = best_time(repeat, lambda: sum(sum(v is not None for v in r.mget(b)) for b in skeys))
    rows = [RateRow("redis-py `MGET` (raw client, no decode)", n, vb, s, found, note="ceiling")]
    loop_keys = [k for b in skeys for k in b][:GET_LOOP_KEYS]
    s, found = best_time(1, lambda: sum(r.get(k) is not None for k in loop_keys))
    rows.append(RateRow("redis-py `GET` loop (raw client)", len(loop_keys), vb, s, found))
    user_keys = keys[:GET_LOOP_KEYS]
    s, found = best_time(1, lambda: sum(cache.get(k) is not None for k in user_keys))
    rows.append(RateRow("redis `cache.get()` loop", len(user_keys), vb, s, found))
    r.close()
    return rows


def sqlite_raw_row(path: Path, skeys: list[list[str]], repeat: int, vb: int) -> RateRow:
    """The stdlib sqlite3 module running the provider's SELECT on its file (same batches of 500)."""
    conn = sqlite3.connect(path)  # like the provider's default: no mmap

    def lookup(b: list[str]) -> int:
        n = 0
        for i in range(0, len(b), 500):
            chunk = b[i : i + 500]
            sql = f"SELECT k, v FROM kv WHERE k IN ({','.join('?' * len(chunk))}) AND expires IS NULL"
            n += len(conn.execute(sql, chunk).fetchall())
        return n

    label = "sqlite3 `SELECT ... IN (...)` (raw, no decode)"
    try:
        s, found = best_time(repeat, lambda: sum(lookup(b) for b in skeys))
    except sqlite3.Error as e:  # the provider's schema changed: say so rather than guess
        return RateRow(label, 0, vb, note=f"failed: {e}")
    finally:
        conn.close()
    return RateRow(label, sum(len(b) for b in skeys), vb, s, found, note="ceiling")


def memcached_raw_row(env: Env, skeys: list[list[str]], repeat: int, vb: int) -> RateRow:
    """The raw pymemcache client's ``get_many`` on the keys the cache stored."""
    mc = memcached_client(env)
    s, found = best_time(repeat, lambda: sum(len(mc.get_many(b)) for b in skeys))
    mc.close()
    return RateRow(
        "pymemcache `get_many` (raw client)", sum(len(b) for b in skeys), vb, s, found, note="ceiling"
    )


def bench_small(a: argparse.Namespace, sizes: Sizes, env: Env) -> dict[str, Any]:
    """Part 1a: 1 KiB bytes values."""
    from torchx_datapipes.cache import open_cache
    from torchx_datapipes.cache.keys import stored_key

    rng = random.Random(a.seed)
    keys = list(range(sizes.small_keys))
    d = {k: rng.randbytes(sizes.small_value) for k in keys}
    batches = batched(keys, sizes.small_batch)
    vb, rep = sizes.small_value, a.repeat
    rows = [
        time_lookups("dict `d[k]` (materialised objects)", batches, rep, lambda b: {k: d[k] for k in b}, vb),
        pickle_ref("dict of pickled bytes + `pickle.loads`", d, batches, rep, vb),
        codec_ref("dict of encoded + `TensorCodec.decode`", d, batches, rep, vb),
        time_lookups(
            "`stored_key()` only (key hashing)",
            batches,
            rep,
            lambda b: {stored_key("ns:0:", k): k for k in b},
            vb,
            "done by every provider",
        ),
    ]
    rows[0].note = "reference"
    for p in a.providers:
        progress(f"1a {p}")
        cache = open_cache(env.url(p, f"bench_cache-{os.getpid()}-small", db="small.db"))
        label = f"**{p}://**" + (f" ({env.sqlite_fs})" if p == "sqlite" else "")
        rows.append(provider_rows(label, cache, batches, d, lambda x, y: x == y, vb, rep))
        prefix = f"{cache.namespace}:{cache.version}:"
        skeys = [[stored_key(prefix, k) for k in b] for b in batches]
        if p == "sqlite":
            rows.append(sqlite_raw_row(env.sqlite_dir / "small.db", skeys, rep, vb))
        if p == "redis":
            rows += redis_raw_rows(env, cache, keys, skeys, rep, vb)
        if p == "memcached":
            rows.append(memcached_raw_row(env, skeys, rep, vb))
        cleanup(cache, keys)
    return {"rows": rows}


def bench_tensor(a: argparse.Namespace, sizes: Sizes, env: Env) -> dict[str, Any]:
    """Part 1b: 1 MiB float32 tensors."""
    import torch

    from torchx_datapipes.cache import TensorCodec, open_cache

    keys = list(range(sizes.tensor_keys))
    elems = sizes.tensor_elems
    d = {k: make_tensor(a.seed + 1, k, elems) for k in keys}
    batches = batched(keys, sizes.tensor_batch)
    vb, rep = elems * 4, a.repeat
    rows = [
        time_lookups("dict `d[k]` (same object, no copy)", batches, rep, lambda b: {k: d[k] for k in b}, vb),
        time_lookups(
            "dict + `t.clone()` (an owned copy)",
            batches,
            rep,
            lambda b: {k: d[k].clone() for k in b},
            vb,
            "reference",
        ),
        pickle_ref("dict of `pickle.dumps(t)` + `pickle.loads`", d, batches, rep, vb),
        codec_ref("dict of encoded + `TensorCodec.decode`", d, batches, rep, vb),
    ]
    codec = TensorCodec()
    for p in a.providers:
        progress(f"1b {p}")
        cache = open_cache(env.url(p, f"bench_cache-{os.getpid()}-tensor", db="tensor.db"))
        label = f"**{p}://**" + (f" ({env.sqlite_fs})" if p == "sqlite" else "")
        row = provider_rows(label, cache, batches, d, torch.equal, vb, rep)
        if p == "memcached":
            enc = len(codec.encode(d[0]))
            row.method += f" ({vb // 1024} KiB tensors)"
            if row.found == 0:
                row.note = (
                    f"NOT STORED: {enc:,} B encoded > max_value_bytes {cache.max_value_bytes:,}"
                    f" (item limit 1 MiB); {row.note}"
                )
        rows.append(row)
        cleanup(cache, keys)
        if p == "memcached":
            rows.append(memcached_under_limit(a, env, codec, batches))
    return {"rows": rows, "tuned": malloc_tuned_rows(a, env, d, batches)}


def malloc_tuned_rows(
    a: argparse.Namespace, env: Env, d: dict[int, Any], batches: list[list[int]]
) -> tuple[str, list[RateRow]]:
    """Part 1b again after ``mallopt``: glibc stops handing 1 MiB blocks back to the kernel.

    By default glibc serves large blocks with mmap or trims the heap top once they are freed,
    so every fresh 1 MiB value may page-fault in new zeroed pages. This changes this process
    for good, which is why it runs last among the in-process measurements (part 2's workers
    are fresh interpreters with the default allocator).
    """
    import ctypes
    import ctypes.util
    import platform

    import torch

    from torchx_datapipes.cache import open_cache

    if platform.libc_ver()[0] != "glibc":
        return "not glibc: skipped", []
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    m_trim_threshold, m_mmap_threshold = -1, -3
    if not (libc.mallopt(m_mmap_threshold, 32 << 20) and libc.mallopt(m_trim_threshold, 1 << 30)):
        return "mallopt failed: skipped", []
    vb, rep = d[0].numel() * 4, a.repeat
    rows = [
        time_lookups(
            "dict + `t.clone()`", batches, rep, lambda b: {k: d[k].clone() for k in b}, vb, "reference"
        ),
        codec_ref("dict of encoded + `TensorCodec.decode`", d, batches, rep, vb),
    ]
    for p in a.providers:
        if p == "memcached":  # 1 MiB values are not stored
            continue
        progress(f"1b {p} (mallopt)")
        cache = open_cache(env.url(p, f"bench_cache-{os.getpid()}-tuned", db="tuned.db"))
        rows.append(provider_rows(f"**{p}://**", cache, batches, d, torch.equal, vb, rep))
        cleanup(cache, list(d))
    return "mallopt(M_MMAP_THRESHOLD=32 MiB, M_TRIM_THRESHOLD=1 GiB)", rows


def memcached_under_limit(a: argparse.Namespace, env: Env, codec: Any, batches: list[list[int]]) -> RateRow:
    """memcached with the largest float32 tensor whose encoding fits ``max_value_bytes``."""
    import torch

    from torchx_datapipes.cache import open_cache

    cache = open_cache(env.url("memcached", f"bench_cache-{os.getpid()}-tensor-fit"))
    limit = int(cache.max_value_bytes or 0)
    overhead = len(codec.encode(torch.zeros(1000))) - 4000 + 16  # + room for more digits in the shape
    elems = (limit - overhead) // 4
    while len(codec.encode(torch.zeros(elems))) > limit:
        elems -= 16
    d = {k: make_tensor(a.seed + 2, k, elems) for b in batches for k in b}
    row = provider_rows("**memcached://**", cache, batches, d, torch.equal, elems * 4, a.repeat)
    enc = len(codec.encode(d[0]))
    row.method += f" ({elems:,}-element tensors, {enc:,} B encoded)"
    row.note = ", ".join(x for x in (f"just under max_value_bytes {limit:,}", row.note) if x)
    cleanup(cache, list(d))
    return row


def _fmt(v: Optional[float], spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def rate_table(rows: Sequence[RateRow], ref: RateRow, with_mb: bool) -> str:
    heads = ["method", "get_many keys/s", *(["MB/s"] if with_mb else []), f"vs {ref.method.split(' (')[0]}"]
    heads += ["set_many keys/s", "read back ok", "note"]
    out = []
    for r in rows:
        rate = r.get_rate
        mb = _fmt(rate * r.value_bytes / MB if rate else None)
        vs = f"{rate / ref.get_rate:.2f}x" if rate and ref.get_rate else "-"
        keys_note = f"{r.keys:,} keys" if r.keys != ref.keys else ""
        note = ", ".join(x for x in (keys_note, r.note) if x)
        out.append([r.method, _fmt(rate), *([mb] if with_mb else []), vs, _fmt(r.set_rate), r.verified, note])
    return md_table(heads, out)


# ---------------------------------------------------------------------------------------------
# Part 2 harness
# ---------------------------------------------------------------------------------------------


@dataclass
class WorkersRow:
    label: str
    provider: str
    results: list[dict[str, Any]] = field(default_factory=list)
    server: str = "-"

    def total(self, where: str, what: str) -> float:
        return sum(r[where][what] for r in self.results) / 1024  # kB -> MiB

    @property
    def growth_mib(self) -> float:
        return sum(r["peak_kb"]["rss"] - r["after_import_kb"]["rss"] for r in self.results) / 1024


def bench_workers(a: argparse.Namespace, sizes: Sizes, env: Env) -> dict[str, Any]:
    """Part 2, once per array kind in ``a.arrays``."""
    return {"runs": [{"array": array, **bench_workers_one(a, sizes, env, array)} for array in a.arrays]}


def bench_workers_one(a: argparse.Namespace, sizes: Sizes, env: Env, array: str) -> dict[str, Any]:
    """Part 2: ``a.workers`` spawned workers reading the working set twice through each cache."""
    from torchx_datapipes.cache import TensorCodec, open_cache

    seed = a.seed + 3
    progress(f"2 ({array}): hashing the {sizes.ws_items} expected values")
    digests = tuple(digest(make_value(array, seed, k, sizes.ws_elems)) for k in range(sizes.ws_items))
    runs: list[tuple[str, str, str, str]] = [("no cache (generate every time)", "none", "", "")]
    ns = f"bench_cache-{os.getpid()}-workers-{array}"
    for p in a.providers:
        if p == "sqlite":
            runs.append(("sqlite:// (default: no mmap)", p, env.url(p, ns, db="ws.db"), "ws.db"))
            url = env.url(p, ns, db="ws-mmap.db", extra=f"&mmap_bytes={1 << 30}")
            runs.append(("sqlite:// (`mmap_bytes=1GiB`)", p, url, "ws-mmap.db"))
        else:
            label = f"{p}://" + (" (private per worker)" if p == "memory" else "")
            runs.append((label, p, env.url(p, ns), ""))
    rows = []
    for label, p, url, db in runs:
        progress(f"2 ({array}): {label}, {a.workers} workers")
        spec = WorkerSpec(
            url,
            array,
            sizes.ws_items,
            sizes.ws_elems,
            sizes.ws_batch,
            sizes.passes,
            a.workers,
            seed,
            digests,
            600,
        )
        path = env.sqlite_dir / db if db else None
        before = server_memory(p, env, path)
        row = WorkersRow(label, p, run_workers(spec, a.timeout))
        row.server = describe_server(p, before, server_memory(p, env, path), env.sqlite_fs, sizes.ws_items)
        rows.append(row)
        if url and p != "memory":
            cleanup(open_cache(url), range(sizes.ws_items))
        if path is not None:
            for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                f.unlink(missing_ok=True)
    encoded = len(TensorCodec().encode(make_value(array, seed, 0, sizes.ws_elems)))
    return {"rows": rows, "encoded": encoded}


def workers_tables(rows: Sequence[WorkersRow], sizes: Sizes, workers: int, quick: bool) -> str:
    heads = ["provider", *[f"pass {i + 1} hits" for i in range(sizes.passes)], "values verified"]
    heads += [f"pass {i + 1} s" for i in range(sizes.passes)]
    heads += ["RSS after import MiB (mean)", "peak RSS MiB (max worker)", "Σ peak RSS MiB", "Σ peak PSS MiB"]
    heads += ["Σ peak USS MiB", "Σ final PSS MiB", "Σ RSS growth MiB", "server side"]
    out = []
    asked = workers * sizes.ws_items
    for r in rows:
        res = r.results
        hits = [sum(x["hits"][i] for x in res) / asked for i in range(sizes.passes)]
        ok, bad = sum(x["ok"] for x in res), sum(x["bad"] for x in res)
        verified = f"{ok:,}/{ok + bad:,}" + (f" **{bad} WRONG**" if bad else "")
        secs = [max(x["seconds"][i] for x in res) for i in range(sizes.passes)]
        errs = sum(x["stats"].get("errors", 0) + x["stats"].get("rejected", 0) for x in res)
        srv = r.server + (f"; stats errors+rejected={errs}" if errs else "")
        cells = [r.label, *[f"{h:.1%}" for h in hits], verified, *[f"{s:.2f}" for s in secs]]
        cells += [f"{r.total('after_import_kb', 'rss') / len(res):.0f}"]
        cells += [f"{max(x['peak_kb']['rss'] for x in res) / 1024:.0f}"]
        cells += [f"{r.total('peak_kb', m):.0f}" for m in ("rss", "pss", "uss")]
        cells += [f"{r.total('final_kb', 'pss'):.0f}", f"{r.growth_mib:.0f}", srv]
        out.append(cells)
    text = md_table(heads, out)
    mem = next((r for r in rows if r.provider == "memory"), None)
    shared = [r for r in rows if r.provider not in ("memory", "none")]
    if mem is None or not shared:
        return text + "\n\n(target check needs memory:// and a shared provider)"
    text += (
        f"\n\nTarget: Σ worker peak RSS with a shared provider >= {RSS_TARGET_RATIO:g}x lower than with"
        f" memory:// (per-process dicts); Σ peak RSS memory:// = {mem.total('peak_kb', 'rss'):,.0f} MiB"
        f"{QUICK_NOTE if quick else ''}\n\n"
    )
    t_rows = []
    for r in shared:
        ratio = mem.total("peak_kb", "rss") / r.total("peak_kb", "rss")
        verdict = "PASS" if ratio >= RSS_TARGET_RATIO else "FAIL"
        pss = mem.total("peak_kb", "pss") / r.total("peak_kb", "pss")
        growth = f"{mem.growth_mib / r.growth_mib:.1f}x" if r.growth_mib > 0 else "-"
        t_rows.append([r.label, f"{ratio:.2f}x", verdict, f"{pss:.2f}x", growth])
    heads = ["provider", "Σ peak RSS ratio memory:// / provider", "target >= 3x", "Σ peak PSS ratio"]
    return text + md_table(heads + ["Σ RSS growth ratio (above after-import)"], t_rows)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def _csv(value: str, valid: Sequence[str], what: str) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    bad = sorted(set(chosen) - set(valid))
    if bad or not chosen:
        raise argparse.ArgumentTypeError(f"--{what}: {bad or value!r} not in {','.join(valid)}")
    return [v for v in valid if v in chosen]


def _memcached_addr(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--memcached expects host:port, got {value!r}")
    return host, int(port)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Benchmark the cache providers (throughput and worker memory).")
    ap.add_argument("--quick", action="store_true", help="smaller sizes: a smoke test in < 1 min")
    ap.add_argument(
        "--providers",
        type=lambda v: _csv(v, PROVIDERS, "providers"),
        default=list(PROVIDERS),
        help=f"comma-separated subset of {','.join(PROVIDERS)} (references always run)",
    )
    ap.add_argument(
        "--parts",
        type=lambda v: _csv(v, PARTS, "parts"),
        default=list(PARTS),
        help=f"comma-separated subset of {','.join(PARTS)}",
    )
    ap.add_argument(
        "--sqlite-dir",
        default="shm",
        help="where the sqlite files go: shm (/dev/shm, RAM), tmp (the temp dir) or a directory",
    )
    ap.add_argument("--workers", type=int, default=4, help="worker processes in part 2")
    ap.add_argument(
        "--arrays",
        type=lambda v: _csv(v, ARRAYS, "arrays"),
        default=list(ARRAYS),
        help="part 2 value types: torch (workers import torch, as DataLoader workers do) and/or numpy"
        " (workers never import torch, isolating what the cache itself costs)",
    )
    ap.add_argument("--ws-items", type=int, help="part 2 working set: number of tensors (800; quick 200)")
    ap.add_argument("--ws-kib", type=int, default=256, help="part 2: KiB per tensor")
    ap.add_argument("--repeat", type=int, help="timed passes per throughput figure, best kept (3; quick 2)")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--memcached", type=_memcached_addr, default=("127.0.0.1", 11211), help="host:port")
    ap.add_argument("--timeout", type=float, default=900, help="seconds for one part-2 run before it fails")
    ap.add_argument("--json", type=Path, help="save the results here")
    a = ap.parse_args(argv)
    if a.workers < 1 or a.ws_kib < 1:
        ap.error("--workers and --ws-kib must be >= 1")
    a.repeat = a.repeat or (2 if a.quick else 3)
    return a


def resolve_sizes(a: argparse.Namespace) -> Sizes:
    s = QUICK if a.quick else FULL
    items = a.ws_items or s.ws_items
    return Sizes(**{**asdict(s), "ws_items": items, "ws_elems": a.ws_kib * 256})


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    os.chdir(REPO_ROOT)
    sizes = resolve_sizes(a)
    base = {"shm": Path("/dev/shm"), "tmp": Path(tempfile.gettempdir())}.get(a.sqlite_dir, Path(a.sqlite_dir))
    if not base.is_dir():
        sys.exit(f"bench_cache: --sqlite-dir {a.sqlite_dir!r}: {base} is not a directory")
    sqlite_dir = Path(tempfile.mkdtemp(prefix="tdp-bench-cache-", dir=base))
    env = Env(a.redis_url, a.memcached, sqlite_dir, fs_type(sqlite_dir))
    import torch

    # DataLoader workers run torch with one thread; and intra-op threads on a loaded 2-core
    # machine make memcpy-sized ops (clone) 10-100x slower at random, which is not what we measure.
    torch.set_num_threads(1)
    try:
        servers = check_services(a.providers, env)
        for line in header(a.providers, env, servers, sizes):
            print(line, flush=True)
        t0 = time.perf_counter()
        results: dict[str, dict[str, Any]] = {}
        parts = (
            ("small", bench_small),
            ("tensor", bench_tensor),
            ("workers", bench_workers),
            ("transform", bench_transform_cache),
        )
        for part, fn in parts:
            if part in a.parts:
                results[part] = fn(a, sizes, env)
        report(a, sizes, results)
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"\n# total {time.perf_counter() - t0:.0f}s, load avg at the end: {load}")
    finally:
        shutil.rmtree(sqlite_dir, ignore_errors=True)
    if a.json:

        def rows_json(rows: Sequence[Any]) -> list[dict[str, Any]]:
            return [{**asdict(r), "get_rate": getattr(r, "get_rate", None)} for r in rows]

        payload: dict[str, Any] = {
            "meta": {"sizes": asdict(sizes), "providers": a.providers, "sqlite_dir": str(base)},
            **{k: rows_json(v["rows"]) for k, v in results.items() if k not in ("workers", "transform")},
        }
        if "transform" in results:
            payload["transform"] = results["transform"]["rows"]
        if "workers" in results:
            payload["workers"] = {r["array"]: rows_json(r["rows"]) for r in results["workers"]["runs"]}
        if "tensor" in results:
            how, tuned = results["tensor"]["tuned"]
            payload["tensor_tuned"] = {"how": how, "rows": rows_json(tuned)}
        write_json(a.json, payload)
        print(f"# results saved to {a.json}")
    return 0


# ---------------------------------------------------------------------------------------------
# Part 3: transform --cache, cold and warm
# ---------------------------------------------------------------------------------------------


def run_transform(
    data: Path, out: Path, artifact_args: list[str], cache_url: str
) -> tuple[float, dict[str, Any]]:
    """The transform runner in this process (1 rank, 1 worker): wall seconds and the manifest."""
    from torchx_datapipes.runner.main import main as runner_main

    args = ["transform", "--input", str(data), "--output", str(out), "--progress_s", "0", *artifact_args]
    t0 = time.perf_counter()
    manifest = runner_main([*args, *(["--cache", cache_url] if cache_url else [])])
    dt = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    assert manifest is not None
    return dt, manifest


def bench_transform_cache(a: argparse.Namespace, sizes: Sizes, env: Env) -> dict[str, Any]:
    """``transform --cache``: no cache vs a cold cache (first run) vs a warm one (a rerun)."""
    from torchx_datapipes import artifact
    from torchx_datapipes.cache import open_cache

    n = 20_000 if a.quick else 200_000
    data = ensure_corpus(n, 4, 0, Path(tempfile.gettempdir()) / "tdp-bench-data")
    rows = []
    for name in ("light", "heavy"):
        ref = artifact.package(load_fn(f"examples/transforms.py:{name}"), str(env.sqlite_dir / "store"))
        art = ["--artifact", ref.url, "--sha256", ref.sha256]
        out = env.sqlite_dir / "out"
        progress(f"3: {name} without a cache")
        base, _ = run_transform(data, out, art, "")
        rows.append({"fn": name, "cache": "none", "run": "-", "seconds": base, "records": n, "hits": 0})
        for p in a.providers:
            if p == "memory":
                continue  # a per-process dict does not survive the job: nothing to rerun against
            url = env.url(p, f"bench_cache-{os.getpid()}-transform-{name}", db="transform.db")
            for run in ("cold", "warm"):
                progress(f"3: {name} {p}:// {run}")
                dt, m = run_transform(data, out, art, url)
                c = m["cache"]
                rows.append(
                    {
                        "fn": name,
                        "cache": p,
                        "run": run,
                        "seconds": dt,
                        "records": n,
                        "hits": c["hits"],
                        "errors": c["errors"],
                        "vs_none": base / dt,
                    }
                )
            open_cache(url).clear()
    return {"rows": rows, "records": n}


def transform_table(rows: Sequence[dict[str, Any]]) -> str:
    body = [
        [
            r["fn"],
            "no cache" if r["cache"] == "none" else f"{r['cache']}://",
            r["run"],
            f"{r['seconds']:.2f}",
            f"{r['records'] / r['seconds']:,.0f}",
            f"{r['hits']:,}",
            "1.00x" if r["cache"] == "none" else f"{r['vs_none']:.2f}x",
        ]
        for r in rows
    ]
    return md_table(["fn", "cache", "run", "s", "records/s", "cache hits", "vs no cache"], body)


def report(a: argparse.Namespace, sizes: Sizes, results: dict[str, dict[str, Any]]) -> None:
    if "small" in results:
        rows: list[RateRow] = results["small"]["rows"]
        print(
            f"\n### 1a. get_many, {sizes.small_value} B bytes values ({sizes.small_keys:,} keys, batches of"
            f" {sizes.small_batch}, codec=tensor; best of {a.repeat} passes)\n"
        )
        print(rate_table(rows, rows[0], with_mb=False))
        redis = next((r for r in rows if r.method.startswith("**redis")), None)
        if redis is not None:
            rate = redis.get_rate or 0.0
            verdict = "PASS" if rate >= REDIS_TARGET_KEYS_S else "FAIL"
            print(
                f"\nTarget: Redis get_many >= {REDIS_TARGET_KEYS_S:,} keys/s for 1 KiB values on loopback:"
                f" measured {rate:,.0f} keys/s -> **{verdict}**{QUICK_NOTE if a.quick else ''}"
            )
    if "tensor" in results:
        rows = results["tensor"]["rows"]
        mib = sizes.tensor_elems * 4 / 2**20
        print(
            f"\n### 1b. get_many, {mib:g} MiB float32 tensors ({sizes.tensor_keys} keys x"
            f" {sizes.tensor_elems:,} elements, batches of {sizes.tensor_batch}; best of {a.repeat};"
            " MB = 1e6 B)\n"
        )
        print(rate_table(rows, rows[1], with_mb=True))
        how, tuned = results["tensor"]["tuned"]
        print(f"\n### 1b'. the same after glibc {how}\n")
        if tuned:
            print(rate_table(tuned, tuned[0], with_mb=True))
            print(
                "\nglibc's defaults hand freed 1 MiB blocks back to the kernel (mmap / heap trim), so each"
                " new value can page-fault in fresh zeroed pages; 1b measures that too, 1b' without it."
            )
    if "transform" in results:
        print(
            f"\n### 3. transform --cache: {results['transform']['records']:,} records, the runner in-process"
            " (1 rank, 1 worker); cold = first run (every record computed and stored), warm = a rerun\n"
        )
        print(transform_table(results["transform"]["rows"]))
    for run in results.get("workers", {}).get("runs", []):
        mib = sizes.ws_items * sizes.ws_elems * 4 / 2**20
        enc, array = run["encoded"], run["array"]
        what = (
            "float32 torch tensors"
            if array == "torch"
            else "float32 numpy arrays (workers never import torch)"
        )
        print(
            f"\n### 2{'' if array == 'torch' else 'b'}. {a.workers} worker processes (spawn), each reading"
            f" {sizes.ws_items} {what} of {sizes.ws_elems * 4 // 1024} KiB ({mib:,.0f} MiB working set;"
            f" {enc:,} B each encoded) through the cache, {sizes.passes} passes\n"
        )
        print(workers_tables(run["rows"], sizes, a.workers, a.quick))
        print(
            "\nRSS counts every page a worker maps, shared or not (torch's libraries, sqlite's mmap of the"
            " database file); PSS splits shared pages among the processes mapping them; USS is the"
            " worker's private memory. Growth = peak RSS - RSS after imports (torch, the cache, a first"
            " connection). Pass times are the slowest worker's."
        )


if __name__ == "__main__":
    sys.exit(main())
