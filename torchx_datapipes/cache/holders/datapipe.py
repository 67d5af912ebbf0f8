"""Map-style DataPipe holders: ``dp.kv_cache(cache)`` and ``dp.in_memory_cache()``.

torchdata <= 0.9's ``InMemoryCacheHolderMapDataPipe`` (``.in_memory_cache()``) kept a plain
dict, so every DataLoader worker filled its own private copy: 64 items read for 3 epochs by
2 non-persistent workers cost 192 source reads instead of 64. :class:`KVCacheHolderMapDataPipe`
keeps the values in a :class:`~torchx_datapipes.cache.Cache` instead; with a shared backend
(``sqlite://``, ``redis://``, ``memcached://``) each item is read from the source once for
all workers, epochs, ranks and reruns.

Keys are the indices (or ``key_fn(index)``), so give each dataset its own cache
``namespace`` (and bump ``version`` when the source or its preprocessing changes).

Note: torch's DataLoader wraps a MapDataPipe in ``_MapDataPipeSerializationWrapper``, which
does not forward ``__getitems__``, so a batch is fetched with one cache lookup per item.
Wrap the pipe in :class:`~torchx_datapipes.cache.holders.CachedDataset` to get one round
trip per batch.

Both functional names are registered idempotently: importing this module again
(``importlib.reload``, a torch.package re-executing its source) never raises.
"""

import logging
import re
from typing import Any, List, Optional, Sequence, TypeVar

from torch.utils.data import MapDataPipe

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.holders._common import CacheLike, KeyFn, cached_getitems, make_key, resolve_cache
from torchx_datapipes.cache.providers.memory import MemoryCache

log = logging.getLogger("torchx_datapipes.cache")
T_co = TypeVar("T_co", covariant=True)
_PACKAGED = re.compile(r"^<torch_package_\d+>\.")


class KVCacheHolderMapDataPipe(MapDataPipe[T_co]):
    """Serves ``source_dp[i]`` through a key/value cache (functional name: ``kv_cache``).

    Args:
        source_dp: the map-style DataPipe whose items are cached.
        cache: a :class:`~torchx_datapipes.cache.Cache` or a URL for ``open_cache``
            (e.g. ``"sqlite://?namespace=train"``).
        key_fn: maps an index to its cache key (default: the index itself).

    Example:
        >>> dp = SequenceWrapper(items).map(decode).kv_cache("redis://10.0.0.5:6379/0?namespace=imgs")
    """

    def __init__(
        self, source_dp: MapDataPipe[T_co], cache: CacheLike, key_fn: Optional[KeyFn] = None
    ) -> None:
        self.source_dp = source_dp
        self.cache: Cache = resolve_cache(cache)
        self.key_fn = key_fn

    def __getitem__(self, index: Any) -> T_co:
        key = make_key(self.key_fn, index, "index")
        return self.cache.get_or_compute(key, lambda: self.source_dp[index])

    def __getitems__(self, indices: Sequence[Any]) -> List[T_co]:
        """The items of ``indices`` in order: one ``get_many``, misses read together, one ``set_many``."""
        return cached_getitems(self.cache, self.source_dp, indices, self.key_fn)

    def __len__(self) -> int:
        return len(self.source_dp)

    def __getstate__(self) -> Any:
        state = {"source_dp": self.source_dp, "cache": self.cache, "key_fn": self.key_fn}
        if MapDataPipe.getstate_hook is not None:
            return MapDataPipe.getstate_hook(state)
        return state

    def __setstate__(self, state: Any) -> None:
        self.__dict__.update(state)


class InMemoryCacheHolderMapDataPipe(KVCacheHolderMapDataPipe[T_co]):
    """torchdata's ``.in_memory_cache()``: a per-process LRU (functional name: ``in_memory_cache``).

    Drop-in for torchdata <= 0.9's holder, now honestly bounded. Every process -- each
    DataLoader worker -- still has its own private copy, exactly like before; use
    ``.kv_cache("sqlite:///...")`` to share one copy between workers. Values are stored
    encoded (they must be picklable), so mutating a returned value never changes the cache.
    A worker starts with an empty cache, under fork as well (a cache keeps per-process
    state only), so warming the cache in the parent does not warm the workers.

    Args:
        source_dp: the map-style DataPipe whose items are cached.
        max_items: keep at most this many items (None: unbounded).
        max_bytes: keep at most this many encoded bytes (None: unbounded).
    """

    def __init__(
        self, source_dp: MapDataPipe[T_co], max_items: Optional[int] = None, max_bytes: Optional[int] = None
    ) -> None:
        super().__init__(source_dp, MemoryCache(max_items=max_items, max_bytes=max_bytes))


def _name(cls: type) -> str:
    """``module.qualname`` of a class, without torch.package's ``<torch_package_N>.`` prefix."""
    return _PACKAGED.sub("", cls.__module__) + "." + cls.__qualname__


def register_functional(name: str, cls: type) -> None:
    """Register ``cls`` as ``MapDataPipe.<name>`` unless that is already done; never raises.

    Re-running this module (``importlib.reload``) replaces the stale registration of the
    same class with the new one; a copy of this module loaded by torch.package never
    displaces the registration of the installed module; a different class registered under
    ``name`` by another library is left alone (with a warning).
    """
    existing = MapDataPipe.functions.get(name)
    if existing is not None:
        args = getattr(existing, "args", ())
        owner = args[0] if args else existing
        same = isinstance(owner, type) and _name(owner) == _name(cls)
        if not same:
            log.warning(
                "MapDataPipe.%s is already registered by %r; keeping it (use %s directly)",
                name,
                owner,
                cls.__qualname__,
            )
            return
        if owner is cls or (_PACKAGED.match(cls.__module__) and not _PACKAGED.match(owner.__module__)):
            return
        MapDataPipe.functions.pop(name, None)
    try:
        MapDataPipe.register_datapipe_as_function(name, cls)
    except Exception:  # registered concurrently by another thread: that registration stands
        if name not in MapDataPipe.functions:
            raise


register_functional("kv_cache", KVCacheHolderMapDataPipe)
register_functional("in_memory_cache", InMemoryCacheHolderMapDataPipe)
