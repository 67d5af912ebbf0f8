"""The cache interface: a small abstract core per backend, everything else built once here.

A backend implements five methods over ``str`` keys and ``bytes`` values:
``_get_many``, ``_set_many``, ``_delete_many``, ``_clear`` and ``_close``. This base class
adds the public API (``get``/``set``/``get_many``/``set_many``/``delete``/``in``/
``get_or_compute``/``clear``/``stats``), the value codec, key hashing, namespaces, TTL,
counters and the failure policy.

Failure policy -- the cache is an optimisation and must never fail a job or return wrong
data: a backend error or timeout is a miss (the caller computes from the source); after
``failures`` consecutive errors the circuit breaker stops calling the server for
``cooldown`` seconds, then lets one probe through; a value that fails to decode is a miss
and is deleted; a value over ``max_value_bytes`` is not stored; a write the server refuses
is counted in ``stats().rejected``. Each kind of problem is logged once per process.
``strict=True`` raises :class:`CacheError` instead (for tests).

Pickling: a cache pickles only its configuration. Connections, counters and the breaker
live in ``_live_*`` attributes that are dropped by ``__getstate__`` and rebuilt lazily in
each process (:mod:`torchx_datapipes.cache.live`), so a cache can be handed to DataLoader
workers under fork, spawn or forkserver, or shipped inside a cloudpickle / torch.package
artifact. Within a process, connections are per thread and counters are shared under a lock.

Trust: a pickled value is loaded only under the cache's trust (:mod:`torchx_datapipes.cache.trust`).
A backend whose store other users can write (``shared_store = True``: Redis, memcached) signs
pickles with the per-user HMAC key by default.
"""

import abc
import inspect
import logging
import os
import time
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    Hashable,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from torchx_datapipes.cache.breaker import CircuitBreaker
from torchx_datapipes.cache.codec import Codec, CodecError, UnsafeValueError, UntrustedValueError, codec_for
from torchx_datapipes.cache.errors import CacheBackendError, CacheValueError
from torchx_datapipes.cache.keys import check_name, raise_equal_keys, stored_key, stored_keys
from torchx_datapipes.cache.live import ProcessLocal
from torchx_datapipes.cache.stats import CacheStats
from torchx_datapipes.cache.trust import Trust
from torchx_datapipes.secrets import mask_url

log = logging.getLogger("torchx_datapipes.cache")
V = TypeVar("V")
K = TypeVar("K", bound=Hashable)
_MISSING: Any = object()


class Cache(ProcessLocal, abc.ABC):
    """A key/value cache shared according to its backend (see ``open_cache``).

    Args:
        namespace: keys of different namespaces never collide; ``clear()`` clears one namespace.
        version: part of every key; bump it to invalidate everything a namespace holds.
        ttl: seconds a value lives (None: until evicted or cleared).
        codec: ``"tensor"`` (default), ``"pickle"``, ``"bytes"`` or a :class:`Codec` object.
        pickle: True: unpickle every pickled value the store holds (trust whoever can write to
            it); False: never unpickle (values that need pickle are not stored); None: the
            backend's default (memory: True; sqlite: the key file ``<db>.key``; redis, memcached:
            the per-user key file ``~/.config/torchx_datapipes/cache-hmac.key``).
        hmac_key, hmac_key_file, hmac_key_env: sign pickled values with HMAC-SHA256 under this key
            (bytes, a file only its owner can read, or an environment variable) and unpickle
            only values whose signature verifies. Tensors, arrays and JSON-able values are never
            pickled. See docs/cache.md, "Trust boundary".
        strict: raise :class:`CacheError` on any failure instead of treating it as a miss.
        timeout: seconds any one backend call may block (network backends).
        failures: consecutive failures that open the circuit breaker.
        cooldown: seconds the breaker stays open before a probe.
        max_value_bytes: encoded values larger than this are not stored (backend default if None).
        clock: monotonic clock for the breaker and TTLs (injected by tests).
    """

    scheme: ClassVar[str] = ""
    # True: other users can write to the store (a server): pickles are signed with the per-user key
    shared_store: ClassVar[bool] = False
    _set_many_takes_ttl: ClassVar[bool] = True
    default_max_value_bytes: ClassVar[Optional[int]] = None

    def __init__(
        self,
        *,
        namespace: str = "default",
        version: str = "0",
        ttl: Optional[float] = None,
        codec: Union[str, Codec] = "tensor",
        strict: bool = False,
        timeout: float = 0.5,
        failures: int = 2,
        cooldown: float = 5.0,
        max_value_bytes: Optional[int] = None,
        pickle: Optional[bool] = None,
        hmac_key: Union[bytes, str, None] = None,
        hmac_key_file: Optional[str] = None,
        hmac_key_env: Optional[str] = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.namespace = check_name("namespace", namespace)
        self.version = check_name("version", str(version))
        if ttl is not None and ttl <= 0:
            raise ValueError(f"cache ttl must be > 0 seconds or None, got {ttl!r}")
        if timeout <= 0:
            raise ValueError(f"cache timeout must be > 0 seconds, got {timeout!r}")
        self.ttl, self.strict, self.timeout = ttl, bool(strict), float(timeout)
        self.failures, self.cooldown = int(failures), float(cooldown)
        self.trust = Trust.resolve(pickle, hmac_key, hmac_key_file, hmac_key_env, self._default_trust())
        self.codec: Codec = codec_for(codec, self.trust)
        self.max_value_bytes = (
            max_value_bytes if max_value_bytes is not None else self.default_max_value_bytes
        )
        self.clock = clock
        CircuitBreaker(self.failures, self.cooldown, clock)  # validate now, not in a worker
        self._live_pid = -1

    # ----------------------------------------------------------------- the abstract core
    @abc.abstractmethod
    def _get_many(self, keys: List[str]) -> Dict[str, bytes]:
        """Stored bytes of the keys that exist (absent keys are left out)."""

    @abc.abstractmethod
    def _set_many(self, items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
        """Store the items; return the keys the backend refused (raise if the call failed)."""

    @abc.abstractmethod
    def _delete_many(self, keys: List[str]) -> None:
        """Delete the keys (absent keys are fine)."""

    @abc.abstractmethod
    def _clear(self, prefix: str) -> None:
        """Delete every key that starts with ``prefix`` (one namespace and version)."""

    def _close(self) -> None:
        """Close this thread's connection ``self._live_conn``, if any, and set it to None.

        The default drops the reference (garbage collection closes it); backends override it.
        """
        self._live_conn = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Accept third-party cores written as ``_set_many(self, items)`` (no ttl parameter)."""
        super().__init_subclass__(**kwargs)
        core = cls.__dict__.get("_set_many")
        if core is not None:
            params = list(inspect.signature(core).parameters.values())[1:]
            varargs = any(p.kind is p.VAR_POSITIONAL for p in params)
            cls._set_many_takes_ttl = varargs or len(params) >= 2

    @classmethod
    def from_url(cls, location: str, path: str, **options: Any) -> "Cache":
        """Build from a parsed URL ``scheme://location/path`` (override to use location/path)."""
        if location or path.strip("/"):
            raise ValueError(f"{cls.__name__} takes no host or path in its URL, got {location + path!r}")
        return cls(**options)

    def _default_trust(self) -> Trust:
        """The trust without ``pickle``/``hmac_key*`` options (override per backend): every pickle,
        or with ``shared_store`` only the pickles signed with the per-user key."""
        return Trust.user() if self.shared_store else Trust("pickle")

    def _prefix(self) -> str:
        return f"{self.namespace}:{self.version}:"

    # ------------------------------------------------------------------- process state
    def _fresh_process_state(self) -> None:
        self._live_breaker = CircuitBreaker(self.failures, self.cooldown, self.clock)
        self._live_stats = CacheStats()

    def _count(self, **deltas: int) -> None:
        with self._live_lock:
            st = self._live_stats
            for name, n in deltas.items():
                setattr(st, name, getattr(st, name) + n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r}, namespace={self.namespace!r})"

    def describe(self) -> str:
        """Where the cache lives, without credentials (for logs and manifests)."""
        return self.scheme + "://"

    def _warn(self, kind: str, message: str) -> None:
        with self._live_lock:
            first = kind not in self._live_warned
            self._live_warned.add(kind)
        if first:
            text = mask_url(message)  # a backend's error may quote a URL with credentials
            log.warning("cache %s: %s (logged once per process; see stats())", self.describe(), text)

    def _call(self, op: str, fn: Callable[..., V], *args: Any) -> Tuple[bool, Optional[V]]:
        """Run a core call under the failure policy: (True, result) or (False, None)."""
        self._live()
        breaker, lock = self._live_breaker, self._live_lock
        with lock:
            allowed = breaker.allow()
            if not allowed:
                self._live_stats.bypassed += 1
        if not allowed:
            if self.strict:
                raise CacheBackendError(f"{self.describe()}: circuit breaker open, {op} not sent")
            return False, None
        try:
            result = fn(*args)
        except Exception as e:
            with lock:
                self._live_stats.errors += 1
                opened = breaker.failure()
                self._live_stats.breaker_opens += opened
            if opened:
                self._warn("breaker", f"circuit breaker opened; retrying after {self.cooldown:g}s")
            if self.strict:
                raise CacheBackendError(f"{self.describe()}: {op} failed: {type(e).__name__}: {e}") from e
            self._warn("error:" + op, f"{op} failed, treated as a miss: {type(e).__name__}: {e}")
            return False, None
        with lock:
            breaker.success()
        return True, result

    # ---------------------------------------------------------------------- public API
    def get_many(self, keys: Iterable[K]) -> Dict[K, Any]:
        """The cached values of the keys that are present; absent or failed keys are left out."""
        keys = list(keys)
        by_stored: Dict[str, K] = dict(zip(stored_keys(self._prefix(), keys), keys))
        if not by_stored:
            return {}
        if len(by_stored) > 1 and len(set(by_stored.values())) != len(by_stored):
            raise_equal_keys(list(by_stored.values()))
        ok, raw = self._call("get", self._get_many, list(by_stored))
        if ok and isinstance(raw, (list, tuple)):  # a core that answers in key order, None = absent
            raw = {k: v for k, v in zip(by_stored, raw) if v is not None}
        found: Dict[K, Any] = {}
        corrupt: List[str] = []
        untrusted = 0
        raw = raw if ok and raw else {}
        decode, nbytes = self.codec.decode, 0
        for skey, key in by_stored.items():  # in the order asked
            data = raw.get(skey)
            if data is None:
                continue
            nbytes += len(data)
            try:
                found[key] = decode(data)
            except UntrustedValueError as e:
                corrupt.append(skey)
                untrusted += 1
                if self.strict:
                    self._count(untrusted=1)
                    raise CacheValueError(f"{self.describe()}: value of {key!r}: {e}") from e
                self._warn("untrusted", f"{e}; treated as a miss and deleted (see stats().untrusted)")
            except CodecError as e:
                corrupt.append(skey)
                if self.strict:
                    self._count(decode_errors=1)
                    raise CacheValueError(f"{self.describe()}: value of {key!r}: {e}") from e
                self._warn("decode", f"a stored value failed to decode ({e}); treated as a miss and deleted")
        self._count(
            hits=len(found),
            misses=len(by_stored) - len(found),
            decode_errors=len(corrupt) - untrusted,
            untrusted=untrusted,
            bytes_read=nbytes,
        )
        if corrupt:
            self._call("delete", self._delete_many, corrupt)
        return found

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The cached value of ``key``, or ``default``."""
        return self.get_many([key]).get(key, default)

    def set_many(self, items: Union[Mapping[K, Any], Iterable[Tuple[K, Any]]]) -> int:
        """Store the values; return how many were stored (oversize/rejected/failed ones are counted)."""
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        self._live()
        limit = self.max_value_bytes
        encoded: Dict[str, bytes] = {}
        unstored: List[str] = []  # values that cannot be stored: an older value must not survive them
        for skey, (k, v) in zip(stored_keys(self._prefix(), [k for k, _ in pairs]), pairs):
            try:
                data = self.codec.encode(v)
            except Exception as e:
                self._count(encode_errors=1)
                if self.strict:
                    raise CacheValueError(f"{self.describe()}: key {k!r}: cannot encode: {e}") from e
                kind = "unsafe" if isinstance(e, UnsafeValueError) else "encode"
                self._warn(kind, f"a value could not be encoded ({type(e).__name__}: {e}); not stored")
                unstored.append(skey)
                continue
            if limit is not None and len(data) > limit:
                self._count(oversize=1)
                msg = f"value of {len(data)} bytes exceeds max_value_bytes={limit}; not stored"
                if self.strict:
                    raise CacheValueError(f"{self.describe()}: key {k!r}: {msg}")
                self._warn("oversize", msg + " (raise max_value_bytes= or the server's item size limit)")
                unstored.append(skey)
                continue
            encoded[skey] = data
        stored: List[str] = []
        if encoded:
            args = (encoded, self.ttl) if self._set_many_takes_ttl else (encoded,)
            if self.ttl is not None and not self._set_many_takes_ttl:
                self._warn("ttl", f"{type(self).__name__}._set_many takes no ttl: ttl={self.ttl:g} ignored")
            ok, refused = self._call("set", self._set_many, *args)
            if not isinstance(refused, (list, tuple, set)):  # None / True from a third-party core
                refused = []
            refused = (refused or []) if ok else []
            if refused:
                self._count(rejected=len(refused))
                unstored.extend(refused)
                msg = f"the server refused {len(refused)} of {len(encoded)} values"
                if self.strict:
                    raise CacheValueError(f"{self.describe()}: {msg}")
                self._warn("rejected", msg + " (they will be recomputed; see stats().rejected)")
            bad = set(refused)
            stored = [k for k in encoded if k not in bad] if ok else []
            self._count(sets=len(stored), bytes_written=sum(len(encoded[k]) for k in stored))
        if unstored:
            self._call("delete", self._delete_many, unstored)
        return len(stored)

    def set(self, key: Hashable, value: Any) -> bool:
        """Store one value; True if it was stored."""
        return self.set_many([(key, value)]) == 1

    def delete_many(self, keys: Iterable[Hashable]) -> None:
        skeys = stored_keys(self._prefix(), list(keys))
        if skeys:
            self._call("delete", self._delete_many, skeys)

    def delete(self, key: Hashable) -> None:
        self.delete_many([key])

    def __contains__(self, key: Hashable) -> bool:
        ok, raw = self._call("get", self._get_many, [stored_key(self._prefix(), key)])
        return bool(ok and raw)

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached value of ``key``; on a miss ``compute()`` it, store it and return it."""
        value = self.get_many([key]).get(key, _MISSING)
        if value is _MISSING:
            value = compute()
            self.set_many([(key, value)])
        return value  # type: ignore[no-any-return]

    def get_or_compute_many(self, keys: Sequence[K], compute: Callable[[List[K]], Sequence[V]]) -> List[V]:
        """Values for ``keys`` in order: one ``get_many``, ``compute(missing_keys)``, one ``set_many``."""
        found = self.get_many(keys)
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            computed = list(compute(missing))
            if len(computed) != len(missing):
                raise ValueError(f"compute returned {len(computed)} values for {len(missing)} keys")
            fresh = dict(zip(missing, computed))
            self.set_many(fresh)
            found.update(fresh)
        return [found[k] for k in keys]

    def clear(self) -> None:
        """Delete every value of this namespace and version (other namespaces are untouched)."""
        self._call("clear", self._clear, self._prefix())

    def stats(self) -> CacheStats:
        """A snapshot of this process's counters (all threads)."""
        self._live()
        with self._live_lock:
            return CacheStats(**self._live_stats.as_dict())

    @property
    def breaker_state(self) -> str:
        self._live()
        return self._live_breaker.state.value

    def close(self) -> None:
        """Close this thread's connection (the cache reconnects if used again)."""
        if self._live_pid == os.getpid():
            self._close()

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
