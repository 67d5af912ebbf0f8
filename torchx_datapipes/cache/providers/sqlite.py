"""``sqlite:///path/to/cache.db``: a node-local cache shared by every process on a machine.

No server: each process opens the same SQLite file (stdlib ``sqlite3``). WAL mode lets
readers run while one process writes; ``synchronous=NORMAL`` skips fsync per commit (a
cache may lose its last writes in a power cut, never its consistency). Hot values sit once
in the OS page cache, shared by all processes. Reads use ``read()`` by default, not an mmap:
with ``mmap_bytes`` > 0 reads are ~10% faster, but every process's RSS then counts each
mapped page of the file, which looks like a private copy per worker to anything that
watches RSS (measured in benchmarks/bench_cache.py). Put the file on local disk or
``/dev/shm``, never on NFS.

Trust: a database another user can write is a database that user can fill, so the file, its
directory and the directories above it are checked (:mod:`torchx_datapipes.cache.private`) when
the cache is opened and before every connection, and refused with the path, owner, mode and fix.
``sqlite://`` alone is the private per-user default ``/dev/shm/tdp-<uid>/cache.db`` (directory
0700, files 0600). Pickled values are signed with a key file ``<db>.key`` (0600) unless
``pickle=`` or an ``hmac_key*`` option says otherwise.

Fork: a WAL connection open in a parent at ``fork()`` corrupts SQLite's per-process lock and
shared-memory state in the child (the child's own connection then fails with "disk I/O
error"; SQLite's docs: never carry an open connection across fork). So before every fork this
process closes its thread's open connections (they reopen on next use), and a cache object
closes its connection when it is freed: Python 3.11's ``sqlite3.Connection`` sits in a reference
cycle with its statement cache, so dropping the last reference leaves the file open until the
garbage collector runs (``open_cache(url).clear()`` then a fork failed that way). Connections
of *other* threads of the parent stay open across a fork: use each cache from one thread, or
``close()`` it in those threads, before forking workers.
LMDB is faster but cannot be used across fork and has a single writer and a fixed size.
"""

import os
import sqlite3
import time
import weakref
from typing import Any, Dict, List, Optional

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.private import check_dirs, check_sqlite_files, default_sqlite_path, make_dirs
from torchx_datapipes.cache.trust import Trust

_SIBLINGS = ("-wal", "-shm", "-journal")  # sqlite's own files next to the database
_BATCH = 500  # bound variables per statement (SQLite allows 32766; smaller is faster to plan)
# A rowid table (not WITHOUT ROWID): values are large rows, which WITHOUT ROWID stores in the
# key's B-tree; measured on tmpfs with 1 KiB values: 138k vs 31k inserts/s, 386k vs 138k reads/s.
_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v BLOB NOT NULL, expires REAL)"
# without it, purging expired rows on every set with a ttl scans the whole table (17 ms at 200k rows)
_EXPIRES_INDEX = "CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires) WHERE expires IS NOT NULL"


# every SqliteCache of this process, for the before-fork hook (weak: a freed cache drops out)
_OPEN: "weakref.WeakSet[SqliteCache]" = weakref.WeakSet()


def _close_before_fork() -> None:
    """``os.register_at_fork(before=...)``: close this thread's connection of every cache."""
    for cache in list(_OPEN):
        cache.close()


class SqliteCache(Cache):
    """A SQLite file shared by all processes of one machine.

    Args:
        path: the database file (created 0600, with its missing directories 0700); "" for the
            private per-user default ``/dev/shm/tdp-<uid>/cache.db``.
        lock_timeout: seconds to wait for another process's write lock before giving up
            (a give-up counts as an error, i.e. a miss or an unstored value).
        mmap_bytes: bytes of the file to map into memory for reads (0: no mmap, the default).
        **options: see :class:`~torchx_datapipes.cache.base.Cache`.
    """

    scheme = "sqlite"
    default_max_value_bytes = 512 * 1024 * 1024

    def __init__(self, path: str, lock_timeout: float = 10.0, mmap_bytes: int = 0, **options: Any) -> None:
        self.path = os.path.abspath(os.path.expanduser(path or default_sqlite_path()))
        self.lock_timeout, self.mmap_bytes = float(lock_timeout), int(mmap_bytes)
        self._check_files()  # before the trust's key file is read or made next to the database
        super().__init__(**options)

    def _default_trust(self) -> Trust:
        return Trust("hmac", key_file=self.path + ".key", create_key=True)

    def _check_files(self) -> None:
        """Refuse a database that another user can write; make it (0600) and its directory (0700)."""
        directory = os.path.dirname(self.path)
        shared = check_dirs(directory, "sqlite cache")
        make_dirs(directory)
        shared = check_dirs(directory, "sqlite cache")  # what was made is ours and private
        check_sqlite_files(self.path, shared, _SIBLINGS)

    @classmethod
    def from_url(cls, location: str, path: str, **options: Any) -> "SqliteCache":
        if location == ".":  # sqlite://./relative.db: urlsplit reads "." as the host
            location, path = "", "." + path
        if location:
            raise ValueError(
                f"sqlite cache URL has a host part {location!r}: write sqlite:///absolute/path.db"
                " (three slashes) or sqlite://./relative.db"
            )
        return cls("" if path in ("", "/") else path, **options)  # sqlite://: the private default

    def describe(self) -> str:
        return f"sqlite://{self.path}"

    def _db(self) -> sqlite3.Connection:
        if self._live_conn is None:
            self._check_files()
            conn = sqlite3.connect(self.path, timeout=self.lock_timeout, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={int(self.lock_timeout * 1000)}")
            self._wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA mmap_size={self.mmap_bytes}")
            conn.execute("PRAGMA cache_size=-16384")  # 16 MiB of page cache per process
            conn.execute(_SCHEMA)
            conn.execute(_EXPIRES_INDEX)
            self._live_conn = conn
            _OPEN.add(self)
        return self._live_conn  # type: ignore[no-any-return]

    def _wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new file to WAL. That needs an exclusive lock and does not wait for
        busy_timeout, so two processes opening a new file at once retry until lock_timeout."""
        deadline = time.monotonic() + self.lock_timeout
        while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            try:
                conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _get_many(self, keys: List[str]) -> Dict[str, bytes]:
        db, now = self._db(), time.time()
        out: Dict[str, bytes] = {}
        for i in range(0, len(keys), _BATCH):
            chunk = keys[i : i + _BATCH]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT k, v FROM kv WHERE k IN ({marks}) AND (expires IS NULL OR expires > ?)",
                (*chunk, now),
            )
            out.update(rows)
        return out

    def _set_many(self, items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
        db = self._db()
        expires = None if ttl is None else time.time() + ttl
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                "INSERT OR REPLACE INTO kv (k, v, expires) VALUES (?, ?, ?)",
                ((k, v, expires) for k, v in items.items()),
            )
            if ttl is not None:
                db.execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires <= ?", (time.time(),))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return []

    def _delete_many(self, keys: List[str]) -> None:
        db = self._db()
        for i in range(0, len(keys), _BATCH):
            chunk = keys[i : i + _BATCH]
            db.execute(f"DELETE FROM kv WHERE k IN ({','.join('?' * len(chunk))})", chunk)

    def _clear(self, prefix: str) -> None:
        # keys are ASCII; every key with this prefix sorts in [prefix, prefix-with-last-char+1)
        self._db().execute(
            "DELETE FROM kv WHERE k >= ? AND k < ?", (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1))
        )

    def _close(self) -> None:
        if self._live_conn is not None:
            self._live_conn.close()
            self._live_conn = None

    def __del__(self) -> None:
        try:
            self.close()  # this process's connection of this thread only; never an inherited one
        except Exception:  # noqa: BLE001 - at interpreter exit modules may already be gone
            pass


os.register_at_fork(before=_close_before_fork)
