"""A key/value cache shared by DataLoader workers, ranks and reruns.

``open_cache(url)`` picks a backend by URL: ``memory://`` (per process, the old
torchdata behaviour), ``sqlite:///path`` (one machine, no server), ``redis://host:port/db``
and ``memcached://host:port[,host:port]`` (a cluster). Every backend has the same API and
the same failure policy: the cache is an optimisation, so a backend failure is a miss,
never a failed job or a wrong value. Caches pickle their configuration only and reconnect
lazily in each process.

Non-goals: this is not a database -- values can be evicted or lost at any time. What it
unpickles is set by its trust (docs/cache.md, "Trust boundary"): tensors, arrays and JSON-able
values are never pickled; a pickle loads only with ``pickle=True`` or a valid HMAC.

Holders (:mod:`torchx_datapipes.cache.holders`: ``CachedDataset``, ``CachedMapper``, ...) import
torch, so they load on first use (``from torchx_datapipes.cache import CachedDataset``) or
when this package is imported after torch; importing them registers the ``MapDataPipe``
functional forms ``.kv_cache(cache)`` and ``.in_memory_cache()``.
"""

import sys
from typing import Any

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.codec import (
    BytesCodec,
    Codec,
    CodecError,
    PickleCodec,
    TensorCodec,
    UnsafeValueError,
    UntrustedValueError,
)
from torchx_datapipes.cache.errors import CacheBackendError, CacheError, CacheTrustError, CacheValueError
from torchx_datapipes.cache.registry import CacheURL, open_cache, register_cache, schemes
from torchx_datapipes.cache.stats import CacheStats
from torchx_datapipes.cache.trust import Trust

__all__ = [
    "BytesCodec",
    "Cache",
    "CacheBackendError",
    "CacheError",
    "CacheStats",
    "CacheTrustError",
    "CacheURL",
    "CacheValueError",
    "Codec",
    "CodecError",
    "PickleCodec",
    "TensorCodec",
    "Trust",
    "UnsafeValueError",
    "UntrustedValueError",
    "open_cache",
    "register_cache",
    "schemes",
]

_HOLDERS = (
    "CachedDataset",
    "CachedFunction",
    "CachedMapper",
    "InMemoryCacheHolderMapDataPipe",
    "KVCacheHolderMapDataPipe",
)


def __getattr__(name: str) -> Any:
    """PEP 562: the holders (which import torch) load when first asked for."""
    if name in _HOLDERS:
        from torchx_datapipes.cache import holders

        return getattr(holders, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if "torch" in sys.modules:  # torch is loaded already: register .kv_cache / .in_memory_cache now
    import torchx_datapipes.cache.holders  # noqa: E402, F401
