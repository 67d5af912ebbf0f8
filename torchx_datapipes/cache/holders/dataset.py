"""``CachedDataset``: any map-style ``torch.utils.data.Dataset`` served through a cache.

``DataLoader`` fetches a batch with ``dataset.__getitems__(indices)`` when the dataset has
one; :class:`CachedDataset` answers it with one ``get_many`` round trip, reads the misses
from the wrapped dataset in one go (its own ``__getitems__`` if it has one) and stores
them with one ``set_many``. With a shared backend every item is read from the source once
for all DataLoader workers (fork, spawn or forkserver), epochs, ranks and reruns.
"""

from typing import Any, Dict, List, Optional, Sequence, TypeVar

from torch.utils.data import Dataset, IterableDataset

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.holders._common import CacheLike, KeyFn, cached_getitems, make_key, resolve_cache

T = TypeVar("T")
_OWN = ("dataset", "cache", "key_fn")


class CachedDataset(Dataset[T]):
    """Wraps a map-style dataset so that ``ds[i]`` is computed once and then served from ``cache``.

    Attributes the wrapper does not have are looked up on the wrapped dataset
    (``cached.classes`` is ``dataset.classes``). Pickling keeps the dataset, the cache's
    configuration and ``key_fn`` only, so DataLoader workers started by spawn or forkserver
    reconnect to the same cache.

    Args:
        dataset: the map-style dataset to cache (not an ``IterableDataset``).
        cache: a :class:`~torchx_datapipes.cache.Cache` or a URL for ``open_cache``.
            Keys are indices: give each dataset its own ``namespace``.
        key_fn: maps an index to its cache key (default: the index itself).

    Example:
        >>> ds = CachedDataset(ImageFolder(root), "sqlite://?namespace=imgs_v1")
        >>> loader = DataLoader(ds, batch_size=64, num_workers=8)
    """

    def __init__(self, dataset: Dataset[T], cache: CacheLike, key_fn: Optional[KeyFn] = None) -> None:
        if isinstance(dataset, IterableDataset):
            raise TypeError(
                "CachedDataset wraps map-style datasets (with __getitem__); for an IterableDataset"
                " cache the per-item work with torchx_datapipes.cache.holders.CachedMapper"
            )
        self.dataset = dataset
        self.cache: Cache = resolve_cache(cache)
        self.key_fn = key_fn

    def __getitem__(self, index: Any) -> T:
        key = make_key(self.key_fn, index, "index")
        return self.cache.get_or_compute(key, lambda: self.dataset[index])

    def __getitems__(self, indices: Sequence[Any]) -> List[T]:
        """The items of ``indices`` in order: one ``get_many``, misses read together, one ``set_many``."""
        return cached_getitems(self.cache, self.dataset, indices, self.key_fn)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # Called only for attributes the wrapper lacks. Never delegate dunders (copy and pickle
        # probe for __deepcopy__, __reduce_ex__, ...) nor our own names: during unpickling
        # __dict__ is still empty and looking up self.dataset here would recurse.
        if name in _OWN or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        try:
            dataset = self.__dict__["dataset"]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None
        return getattr(dataset, name)

    def __getstate__(self) -> Dict[str, Any]:
        return {"dataset": self.dataset, "cache": self.cache, "key_fn": self.key_fn}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dataset!r}, cache={self.cache!r})"
