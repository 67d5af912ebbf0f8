"""Choose a cache by URL: ``open_cache("redis://127.0.0.1:6379/0?namespace=tok&ttl=3600")``.

Layered like fsspec's registry (the shared :class:`torchx_datapipes.plugins.Registry`): a
table of import strings (so ``import torchx_datapipes`` never imports redis or pymemcache),
:func:`register_cache` for code, and the entry-point group ``torchx_datapipes.cache`` for
third-party packages::

    [project.entry-points."torchx_datapipes.cache"]
    mycache = "my_pkg.cache:MyCache"     # a Cache subclass with a from_url classmethod

Query options common to every provider: namespace, version, ttl, codec, strict, timeout,
failures, cooldown, max_value_bytes, and the trust for pickled values: pickle, hmac_key_file,
hmac_key_env (an HMAC key itself never goes in a URL). Provider options: memory ``max_items``,
``max_bytes``; sqlite ``lock_timeout``, ``mmap_bytes``.
"""

import inspect
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Set, Tuple, Type, Union

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.plugins import Registry
from torchx_datapipes.secrets import mask_url

ENTRY_POINT_GROUP = "torchx_datapipes.cache"
_P = "torchx_datapipes.cache.providers."
_KNOWN: Dict[str, str] = {
    "memory": _P + "memory:MemoryCache",
    "sqlite": _P + "sqlite:SqliteCache",
    "redis": _P + "redis:RedisCache",
    "rediss": _P + "redis:RedisCache",
    "memcached": _P + "memcached:MemcachedCache",
}
PROVIDERS: Registry[Type[Cache]] = Registry("cache scheme", ENTRY_POINT_GROUP, _KNOWN)

_BOOL = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _bool(v: str) -> bool:
    if v.lower() not in _BOOL:
        raise ValueError(f"expected true or false, got {v!r}")
    return _BOOL[v.lower()]


OPTION_TYPES: Dict[str, Callable[[str], Any]] = {
    "namespace": str,
    "version": str,
    "ttl": float,
    "codec": str,
    "strict": _bool,
    "timeout": float,
    "failures": int,
    "cooldown": float,
    "max_value_bytes": int,
    "pickle": _bool,
    "hmac_key_file": str,
    "hmac_key_env": str,
    "max_items": int,
    "max_bytes": int,
    "lock_timeout": float,
    "mmap_bytes": int,
}


@dataclass(frozen=True)
class CacheURL:
    """A parsed cache URL: ``scheme://location/path?option=value&...``."""

    scheme: str
    location: str
    path: str
    options: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str) -> "CacheURL":
        parts = urllib.parse.urlsplit(url)
        if not parts.scheme or "://" not in url:
            raise ValueError(
                f"cache URL {mask_url(url)!r} has no scheme; use one of {', '.join(sorted(schemes()))}"
                " (e.g. redis://127.0.0.1:6379/0, sqlite:// for a private per-user file, memory://)"
            )
        options: Dict[str, Any] = {}
        for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
            if name == "hmac_key":
                raise ValueError(
                    f"cache URL {mask_url(url)!r}: an HMAC key never goes in a URL (command lines are"
                    " printed and visible in ps); use hmac_key_file=PATH or hmac_key_env=NAME"
                )
            if name not in OPTION_TYPES:
                raise ValueError(
                    f"cache URL {mask_url(url)!r}: unknown option {name!r}; valid: {', '.join(OPTION_TYPES)}"
                )
            try:
                options[name] = OPTION_TYPES[name](value)
            except ValueError as e:
                raise ValueError(
                    f"cache URL {mask_url(url)!r}: option {name}={value!r} is not valid: {e}"
                ) from e
        return cls(parts.scheme.lower(), parts.netloc, parts.path, options)


def register_cache(scheme: str, cls: Union[str, Type[Cache]], clobber: bool = False) -> None:
    """Make ``scheme://`` URLs open ``cls`` (a Cache subclass or ``"module:Class"``)."""
    PROVIDERS.register(scheme, cls, clobber)


def schemes() -> Tuple[str, ...]:
    return PROVIDERS.names()


def cache_class(scheme: str) -> Type[Cache]:
    """The Cache class for a scheme (imports its module now)."""
    return PROVIDERS.load(scheme)


def open_cache(url: Union[str, Cache], **overrides: Any) -> Cache:
    """Open the cache a URL names; keyword arguments override URL options.

    Examples: ``memory://?max_items=10000``, ``sqlite://`` (``/dev/shm/tdp-<uid>/cache.db``),
    ``redis://127.0.0.1:6379/0?namespace=tokens&ttl=86400``,
    ``memcached://10.0.0.1:11211,10.0.0.2:11211?timeout=0.2``.
    A Cache object is returned as it is.
    """
    if isinstance(url, Cache):
        return url
    spec = CacheURL.parse(url)
    cls = cache_class(spec.scheme)
    options = {**spec.options, **overrides}
    valid = _accepted(cls)
    wrong = sorted(set(options) - valid)
    if wrong:
        raise ValueError(
            f"cache option(s) {', '.join(wrong)} do not apply to {spec.scheme}:// caches;"
            f" valid: {', '.join(sorted(valid))}"
        )
    extra = {"scheme": spec.scheme} if spec.scheme in ("redis", "rediss") else {}
    return cls.from_url(spec.location, spec.path, **extra, **options)  # type: ignore[attr-defined,no-any-return]


_FROM_URL = {"self", "url", "path", "servers"}  # built-in providers take these from the URL itself


def _accepted(cls: Type[Cache]) -> Set[str]:
    """Keyword arguments ``cls`` accepts: its own ``__init__``'s and those of its bases."""
    names: Set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in _FROM_URL:
                names.add(p.name)
    return names
