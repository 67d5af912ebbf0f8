"""``memory://``: a per-process dict -- torchdata's old ``in_memory_cache``, honestly bounded.

Every process (DataLoader worker, rank) has its own private copy and nothing is shared;
use it for single-process work or as a baseline. Values are stored encoded, so a
caller mutating a returned tensor never changes the cache, and ``max_bytes`` counts real
bytes. The least recently used entries are evicted beyond ``max_items`` / ``max_bytes``.
"""

import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

from torchx_datapipes.cache.base import Cache

Entry = Tuple[Optional[float], bytes]  # (expiry on the monotonic clock, value)


class MemoryCache(Cache):
    """A private LRU dict per process.

    Args:
        max_items: evict least recently used entries beyond this many (None: unbounded).
        max_bytes: evict least recently used entries beyond this many value bytes (None: unbounded).
        **options: see :class:`~torchx_datapipes.cache.base.Cache`.
    """

    scheme = "memory"

    def __init__(
        self, max_items: Optional[int] = None, max_bytes: Optional[int] = None, **options: Any
    ) -> None:
        super().__init__(**options)
        for name, v in (("max_items", max_items), ("max_bytes", max_bytes)):
            if v is not None and v < 1:
                raise ValueError(f"memory cache {name} must be >= 1 or None, got {v!r}")
        self.max_items, self.max_bytes = max_items, max_bytes
        if max_bytes is not None and (self.max_value_bytes is None or self.max_value_bytes > max_bytes):
            self.max_value_bytes = max_bytes

    def describe(self) -> str:
        return "memory://"

    def _store(self) -> "OrderedDict[str, Entry]":
        """This process's dict (shared by its threads; callers hold ``_live_lock``)."""
        store: Optional[OrderedDict[str, Entry]] = self.__dict__.get("_live_store")
        if store is None:
            store = OrderedDict()
            self._live_store: OrderedDict[str, Entry] = store
            self._live_store_bytes = 0
        return store

    def _get_many(self, keys: List[str]) -> Dict[str, bytes]:
        with self._live_lock:
            return self._get_locked(keys)

    def _get_locked(self, keys: List[str]) -> Dict[str, bytes]:
        store, now, out = self._store(), time.monotonic(), {}
        for k in keys:
            entry = store.get(k)
            if entry is None:
                continue
            if entry[0] is not None and entry[0] <= now:
                self._drop(k)
                continue
            store.move_to_end(k)
            out[k] = entry[1]
        return out

    def _set_many(self, items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
        with self._live_lock:
            self._set_locked(items, ttl)
        return []

    def _set_locked(self, items: Dict[str, bytes], ttl: Optional[float]) -> None:
        store = self._store()
        expiry = None if ttl is None else time.monotonic() + ttl
        for k, v in items.items():
            self._drop(k)
            store[k] = (expiry, v)
            self._live_store_bytes += len(v)
        while store and (
            (self.max_items is not None and len(store) > self.max_items)
            or (self.max_bytes is not None and self._live_store_bytes > self.max_bytes)
        ):
            self._drop(next(iter(store)))

    def _drop(self, key: str) -> None:
        entry = self._store().pop(key, None)
        if entry is not None:
            self._live_store_bytes -= len(entry[1])

    def _delete_many(self, keys: List[str]) -> None:
        with self._live_lock:
            for k in keys:
                self._drop(k)

    def _clear(self, prefix: str) -> None:
        with self._live_lock:
            for k in [k for k in self._store() if k.startswith(prefix)]:
                self._drop(k)

    def _close(self) -> None:
        """Nothing to close: the values stay until evicted, cleared or the process ends."""

    def __len__(self) -> int:
        self._live()
        with self._live_lock:
            return len(self._store())
