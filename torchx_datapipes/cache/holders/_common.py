"""What every holder shares: opening the cache, default keys and the batched lookup."""

import operator
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Union

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.registry import open_cache

KeyFn = Callable[[Any], Hashable]
CacheLike = Union[Cache, str]
_SCALARS = (str, bytes, int, float, bool, type(None))


def resolve_cache(cache: CacheLike) -> Cache:
    """A :class:`Cache` from a Cache object or a URL such as ``sqlite://?namespace=imgs``."""
    if isinstance(cache, (Cache, str)):
        return open_cache(cache)
    raise TypeError(
        f"cache must be a Cache or a cache URL string (e.g. 'sqlite://?namespace=imgs'),"
        f" got {type(cache).__name__}"
    )


def is_key(value: Any) -> bool:
    """True if ``value`` is a valid cache key: str/bytes/int/float/bool/None or a tuple of those."""
    if isinstance(value, tuple):
        return all(is_key(v) for v in value)
    return isinstance(value, _SCALARS)


def default_key(value: Any, what: str = "item") -> Hashable:
    """``value`` itself as a cache key (integer-like objects such as numpy ints become ``int``).

    Raises:
        TypeError: ``value`` is not a valid key; the message tells the user to pass ``key_fn``.
    """
    if is_key(value):
        return value
    if hasattr(type(value), "__index__"):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(
        f"cannot use the {what} {_short(value)} of type {type(value).__module__}.{type(value).__qualname__}"
        " as a cache key: keys must be str, bytes, int, float, bool, None or tuples of those."
        " Pass key_fn= to derive a stable key from it, e.g. key_fn=lambda item: item['id']"
    )


def make_key(key_fn: Optional[KeyFn], value: Any, what: str) -> Hashable:
    """``key_fn(value)`` if given, else :func:`default_key`."""
    return key_fn(value) if key_fn is not None else default_key(value, what)


def fetch_many(source: Any, indices: Sequence[Any]) -> List[Any]:
    """``source[i]`` for each index, through ``source.__getitems__`` when it has one."""
    getitems = getattr(source, "__getitems__", None)
    if getitems:
        values = list(getitems(list(indices)))
        if len(values) != len(indices):
            name = type(source).__name__
            raise ValueError(f"{name}.__getitems__ returned {len(values)} values for {len(indices)} indices")
        return values
    return [source[i] for i in indices]


def cached_getitems(cache: Cache, source: Any, indices: Sequence[Any], key_fn: Optional[KeyFn]) -> List[Any]:
    """``source[i]`` for each index: one ``get_many``, the misses fetched together, one ``set_many``.

    Indices whose keys are equal are fetched once (the first such index is used).
    """
    keys = [make_key(key_fn, i, "index") for i in indices]
    index_of: Dict[Hashable, Any] = {}
    for k, i in zip(keys, indices):
        index_of.setdefault(k, i)

    def compute(missing: List[Hashable]) -> List[Any]:
        return fetch_many(source, [index_of[k] for k in missing])

    return cache.get_or_compute_many(keys, compute)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
