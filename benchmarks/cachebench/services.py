"""Services, versions, server-side memory: where each provider lives for a run (``Env``), the
check that Redis and memcached answer (with a hint when they do not), the run's header lines
(versions, servers, sizes), and the server-side counters whose change part 2 reports.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional

from .shared import MB, Sizes

NET_TIMEOUT_S = 5.0


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
