"""Cache a per-item function in a ``torchdata.nodes`` graph.

:class:`CachedFunction` wraps ``fn`` so that ``fn(item)`` runs once per key and is then
served from the cache; :class:`CachedMapper` is a node that maps its source with it,
inline or in ``num_workers`` threads or processes, and checkpoints like ``ParallelMapper``
(``state_dict()`` / ``reset(state)``, also through ``torchdata.nodes.Loader``).

Example:
    >>> node = CachedMapper(IterableWrapper(paths), decode_image, "redis://10.0.0.5:6379/0?namespace=img",
    ...                     num_workers=4)
    >>> loader = Loader(node)
"""

import functools
from typing import Any, Callable, Dict, Generic, Hashable, List, Literal, Optional, Sequence, TypeVar

from torchdata.nodes import BaseNode, Batcher, ParallelMapper, Unbatcher

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.holders._common import CacheLike, make_key, resolve_cache

X = TypeVar("X")
T = TypeVar("T")


class CachedFunction(Generic[X, T]):
    """``fn`` memoised in a cache: ``cached(item)`` is ``fn(item)``, computed once per key.

    A plain picklable callable (the cache pickles its configuration only), so it can be
    handed to process workers, DataLoader workers or shipped in an artifact.

    Args:
        fn: the per-item function (its results must be picklable).
        cache: a :class:`~torchx_datapipes.cache.Cache` or a URL for ``open_cache``.
        key_fn: maps an item to its cache key. Default: the item itself, which must then be
            a str, bytes, int, float, bool, None or a tuple of those (a TypeError says so).
            Include everything ``fn``'s result depends on; bump the cache ``version`` when
            ``fn`` changes.
    """

    def __init__(
        self, fn: Callable[[X], T], cache: CacheLike, key_fn: Optional[Callable[[X], Hashable]] = None
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.cache: Cache = resolve_cache(cache)
        self.key_fn = key_fn

    def key(self, item: X) -> Hashable:
        """The cache key of ``item``."""
        return make_key(self.key_fn, item, "item")

    def __call__(self, item: X) -> T:
        return self.cache.get_or_compute(self.key(item), functools.partial(self.fn, item))

    def map_batch(self, items: Sequence[X]) -> List[T]:
        """``[self(x) for x in items]`` with one ``get_many`` and one ``set_many`` for the batch."""
        keys = [self.key(x) for x in items]
        item_of: Dict[Hashable, X] = {}
        for k, x in zip(keys, items):
            item_of.setdefault(k, x)
        return self.cache.get_or_compute_many(keys, lambda missing: [self.fn(item_of[k]) for k in missing])

    def __getstate__(self) -> Dict[str, Any]:
        return {"fn": self.fn, "cache": self.cache, "key_fn": self.key_fn}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self.fn, '__qualname__', self.fn)!r}, cache={self.cache!r})"


class CachedMapper(BaseNode[T]):
    """Maps ``source`` with ``map_fn`` memoised in ``cache``; a checkpointable ``BaseNode``.

    Runs inline (``num_workers=0``) or in ``ParallelMapper`` workers; the arguments after
    ``key_fn`` are ``ParallelMapper``'s. With ``prebatch=n`` the items are looked up and
    stored ``n`` at a time (one ``get_many`` + one ``set_many`` per batch), which pays off
    for network caches; the output is still one item at a time.

    Args:
        source: the node whose items are mapped.
        map_fn: the per-item function.
        cache: a :class:`~torchx_datapipes.cache.Cache` or a URL for ``open_cache``.
        key_fn: maps an item to its cache key (default: the item itself, see :class:`CachedFunction`).
        num_workers: 0 maps in the calling thread; more maps in that many threads or processes.
        in_order: yield results in source order.
        method: ``"thread"`` or ``"process"``.
        multiprocessing_context: ``"fork"``, ``"spawn"``, ``"forkserver"`` or None (default).
        max_concurrent: items in flight at most (default ``2 * num_workers``).
        snapshot_frequency: how often the source's state is snapshotted.
        prebatch: look up and store this many items per cache round trip.
    """

    IT_STATE_KEY = "it_state"

    def __init__(
        self,
        source: BaseNode[X],
        map_fn: Callable[[X], T],
        cache: CacheLike,
        key_fn: Optional[Callable[[X], Hashable]] = None,
        num_workers: int = 0,
        in_order: bool = True,
        method: Literal["thread", "process"] = "thread",
        multiprocessing_context: Optional[str] = None,
        max_concurrent: Optional[int] = None,
        snapshot_frequency: int = 1,
        prebatch: Optional[int] = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.fn: CachedFunction[X, T] = CachedFunction(map_fn, cache, key_fn)
        self.prebatch = prebatch
        options: Dict[str, Any] = dict(
            num_workers=num_workers,
            in_order=in_order,
            method=method,
            multiprocessing_context=multiprocessing_context,
            max_concurrent=max_concurrent,
            snapshot_frequency=snapshot_frequency,
        )
        self._it: BaseNode[T]
        if prebatch is None:
            self._it = ParallelMapper(source, self.fn, **options)
        else:
            if prebatch <= 0:
                raise ValueError(f"prebatch must be a positive integer, got {prebatch!r}")
            batches: BaseNode[List[X]] = Batcher(source, batch_size=prebatch, drop_last=False)
            self._it = Unbatcher(ParallelMapper(batches, self.fn.map_batch, **options))

    @property
    def cache(self) -> Cache:
        """The cache the results live in."""
        return self.fn.cache

    def reset(self, initial_state: Optional[Dict[str, Any]] = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            self._it.reset(initial_state[self.IT_STATE_KEY])
        else:
            self._it.reset()

    def next(self) -> T:
        return next(self._it)

    def get_state(self) -> Dict[str, Any]:
        return {self.IT_STATE_KEY: self._it.state_dict()}
