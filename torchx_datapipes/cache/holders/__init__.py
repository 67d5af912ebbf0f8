"""Cache holders: serve a dataset, DataPipe or per-item function through a shared cache.

Importing this package imports torch and torchdata and registers the ``MapDataPipe``
functional forms ``.kv_cache(cache, key_fn=None)`` and ``.in_memory_cache()``.

* :class:`CachedDataset` -- any map-style ``torch.utils.data.Dataset`` (one cache round
  trip per DataLoader batch).
* :class:`KVCacheHolderMapDataPipe` (``dp.kv_cache(...)``) and
  :class:`InMemoryCacheHolderMapDataPipe` (``dp.in_memory_cache()``, torchdata's old
  per-process holder) -- map-style DataPipes.
* :class:`CachedFunction` / :class:`CachedMapper` -- a per-item function in a
  ``torchdata.nodes`` graph.

With ``sqlite://``, ``redis://`` or ``memcached://`` every item is computed once for all
DataLoader workers (fork, spawn or forkserver), epochs, ranks and reruns; ``memory://``
keeps one private copy per process, like torchdata's old ``in_memory_cache``.
"""

from torchx_datapipes.cache.holders.datapipe import InMemoryCacheHolderMapDataPipe, KVCacheHolderMapDataPipe
from torchx_datapipes.cache.holders.dataset import CachedDataset
from torchx_datapipes.cache.holders.nodes import CachedFunction, CachedMapper

__all__ = [
    "CachedDataset",
    "CachedFunction",
    "CachedMapper",
    "InMemoryCacheHolderMapDataPipe",
    "KVCacheHolderMapDataPipe",
]
