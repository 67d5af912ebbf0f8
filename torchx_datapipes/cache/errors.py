"""Cache failures. Outside ``strict=True`` none of these reach the user: a failure is a miss."""

from torchx_datapipes.errors import DatapipesError


class CacheError(DatapipesError):
    """Base class of cache errors (raised only with ``strict=True``, or for bad configuration)."""


class CacheBackendError(CacheError):
    """The server failed, timed out, or the circuit breaker is open."""


class CacheValueError(CacheError):
    """A value could not be stored (too large, rejected) or decoded."""


class CacheTrustError(CacheError, PermissionError):
    """A cache file, directory or key that another user could write (or read, for a key) is refused."""
