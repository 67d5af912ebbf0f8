"""Part 1, throughput: ``get_many`` / ``set_many`` keys/s per provider for 1 KiB ``bytes`` values
(1a) and 1 MiB float32 tensors (1b, and 1b' after ``mallopt``), next to the references (dict
lookups, pickle, the codec alone, key hashing) and each provider's raw client on the same stored
keys (the ceiling), with every value read back and compared; and the markdown table of the rows.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .services import Env, memcached_client, redis_client
from .shared import MB, Sizes, batched, cleanup, md_table, progress
from .values import make_tensor

if TYPE_CHECKING:
    from torchx_datapipes.cache import Cache

GET_LOOP_KEYS = 10_000  # keys for the one-key-per-call loops (a GET loop is ~20x slower)


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


def best_time(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    """The fastest of ``repeat`` calls of ``fn`` (seconds) and what the last call returned."""
    best, n = math.inf, 0
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


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
