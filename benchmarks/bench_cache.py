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
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, write_json  # noqa: E402
from cachebench.services import Env, check_services, fs_type, header  # noqa: E402
from cachebench.shared import FULL, QUICK, QUICK_NOTE, Sizes  # noqa: E402
from cachebench.throughput import RateRow, bench_small, bench_tensor, rate_table  # noqa: E402
from cachebench.transform import bench_transform_cache, transform_table  # noqa: E402
from cachebench.values import ARRAYS  # noqa: E402
from cachebench.workers import bench_workers, workers_tables  # noqa: E402

PROVIDERS = ("memory", "sqlite", "redis", "memcached")
PARTS = ("small", "tensor", "workers", "transform")
REDIS_TARGET_KEYS_S = 200_000


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
