"""``memcached://host:port[,host:port...]``: a cache shared over one or more memcached servers.

pymemcache pitfalls avoided (../shared/DESIGN.md): keys are always hashed to < 250 ASCII
bytes by the base class; ``noreply=False``, because with noreply a value over the item
size limit is dropped while ``set`` reports success; pymemcache's ``HashClient`` with
``ignore_exc`` reported 0 failed keys while half were lost, so several servers are handled
here: keys are placed by pymemcache's rendezvous hash, each server is called in parallel
(one timeout bounds the call) and has its own circuit breaker, and a dead server's keys
are counted as misses, never reported as hits.

memcached cannot list keys, so ``clear()`` writes a new random generation token for the
namespace; every value carries the token it was written under and a value from an older
generation is a miss. The token rides along in the same ``get_many`` round trip.

Trust: memcached has no access control, so anyone who can reach its port can plant a pickle;
pickled values are signed with the per-user HMAC key (``~/.config/torchx_datapipes/cache-hmac.key``)
unless ``pickle=`` or an ``hmac_key*`` option says otherwise.
"""

import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, List, Optional, Tuple, cast

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.breaker import CircuitBreaker
from torchx_datapipes.cache.providers import require

GEN_BYTES = 16
_NO_GEN = b"0" * GEN_BYTES
_MAX_RELATIVE_TTL = 30 * 24 * 3600


def _parse_servers(location: str) -> Tuple[Tuple[str, int], ...]:
    servers = []
    for item in location.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(
                f"memcached server {item!r} is not host:port; write memcached://host:11211[,host2:11211]"
            )
        servers.append((host.strip("[]"), int(port)))
    return tuple(servers)


def _expire(ttl: Optional[float]) -> int:
    """memcached's exptime: whole seconds; beyond 30 days it must be an absolute Unix time."""
    if ttl is None:
        return 0
    seconds = max(1, math.ceil(ttl))
    # memcached reads an exptime over 30 days as a Unix timestamp (1970 + 40 days: already expired)
    return seconds if seconds <= _MAX_RELATIVE_TTL else int(time.time()) + seconds


class MemcachedCache(Cache):
    """memcached over the network, on one server or several.

    Args:
        servers: ``(host, port)`` pairs.
        **options: see :class:`~torchx_datapipes.cache.base.Cache`. ``max_value_bytes``
            defaults to just under memcached's 1 MiB item size (raise it with memcached ``-I``).
    """

    scheme = "memcached"
    shared_store = True  # pickles signed with the per-user key by default
    default_max_value_bytes = 1024 * 1024 - 1024 - GEN_BYTES

    def __init__(
        self, servers: Tuple[Tuple[str, int], ...] = (("127.0.0.1", 11211),), **options: Any
    ) -> None:
        super().__init__(**options)
        require("pymemcache", "memcached")
        if not servers:
            raise ValueError("memcached cache needs at least one server: memcached://host:11211")
        self.servers = tuple((str(h), int(p)) for h, p in servers)

    @classmethod
    def from_url(cls, location: str, path: str, **options: Any) -> "MemcachedCache":
        if path not in ("", "/"):
            raise ValueError(
                f"memcached URL takes no path, got {path!r}: memcached://host:11211[,host2:11211]"
            )
        return cls(_parse_servers(location), **options)

    def describe(self) -> str:
        return "memcached://" + ",".join(f"{h}:{p}" for h, p in self.servers)

    # --------------------------------------------------------------------- connections
    def _clients(self) -> Dict[str, Any]:
        """This thread's clients, one per server (pymemcache clients are not thread-safe)."""
        if self._live_conn is None:
            from pymemcache.client.base import Client

            self._shared()
            self._live_conn = {
                f"{h}:{p}": Client(
                    (h, p),
                    connect_timeout=self.timeout,
                    timeout=self.timeout,
                    no_delay=True,
                    default_noreply=False,
                )
                for h, p in self.servers
            }
        return self._live_conn  # type: ignore[no-any-return]

    def _shared(self) -> None:
        """Per-process state shared by threads: key placement, per-server breakers, a pool."""
        with self._live_lock:
            if "_live_ring" in self.__dict__:
                return
            from pymemcache.client.rendezvous import RendezvousHash

            names = [f"{h}:{p}" for h, p in self.servers]
            self._live_breakers = {n: CircuitBreaker(self.failures, self.cooldown, self.clock) for n in names}
            self._live_pool = ThreadPoolExecutor(len(names)) if len(names) > 1 else None
            self._live_gen: Optional[bytes] = None
            self._live_ring = RendezvousHash(names)

    def _by_server(self, keys: List[str]) -> Dict[str, List[str]]:
        clients = self._clients()
        if len(clients) == 1:
            return {next(iter(clients)): keys}
        groups: Dict[str, List[str]] = {}
        for k in keys:
            groups.setdefault(self._live_ring.get_node(k), []).append(k)
        return groups

    def _fan_out(self, keys: List[str], call: Callable[[Any, List[str]], Any]) -> Dict[str, Any]:
        """``call(client, keys)`` per server; a single server's errors propagate, several degrade."""
        groups, clients = self._by_server(keys), self._clients()
        if len(clients) == 1:
            ((node, ks),) = groups.items()
            return {node: call(clients[node], ks)}
        breakers, lock, results = self._live_breakers, self._live_lock, {}
        with lock:
            live = {n: ks for n, ks in groups.items() if breakers[n].allow()}
        pool = cast(ThreadPoolExecutor, self._live_pool)  # several servers: always a pool
        futures = {n: pool.submit(call, clients[n], ks) for n, ks in live.items()}
        failed: List[BaseException] = []
        opened = 0
        for node, fut in futures.items():
            try:
                results[node] = fut.result()
                with lock:
                    breakers[node].success()
            except Exception as e:
                with lock:
                    opened += breakers[node].failure()
                failed.append(e)
        if opened:
            self._count(breaker_opens=opened)
        if failed and not results:
            raise failed[0]
        if failed or len(live) < len(groups):
            self._count(errors=len(failed), bypassed=len(groups) - len(live))
            self._warn(
                "server",
                f"{len(groups) - len(results)} of {len(groups)} servers unavailable; their keys miss",
            )
        return results

    # ------------------------------------------------------------------------- the core
    def _gen_key(self) -> str:
        return f"{self.namespace}:{self.version}:gen"

    def _get_many(self, keys: List[str]) -> Dict[str, bytes]:
        gen_key = self._gen_key()
        raw: Dict[str, bytes] = {}
        for part in self._fan_out([*keys, gen_key], lambda c, ks: c.get_many(ks)).values():
            raw.update((k.decode() if isinstance(k, bytes) else k, v) for k, v in part.items())
        gen = raw.pop(gen_key, _NO_GEN)
        self._live_gen = gen
        return {k: v[GEN_BYTES:] for k, v in raw.items() if v[:GEN_BYTES] == gen}

    def _generation(self) -> bytes:
        if self._live_gen is None:
            self._get_many([])
        return self._live_gen or _NO_GEN

    def _set_many(self, items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
        from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

        self._clients()
        gen, expire = self._generation(), _expire(ttl)

        def store(client: Any, keys: List[str]) -> List[str]:
            try:
                failed = client.set_many({k: gen + items[k] for k in keys}, expire=expire, noreply=False)
            except (MemcacheServerError, MemcacheClientError):  # e.g. "object too large for cache"
                return keys
            return [k.decode() if isinstance(k, bytes) else k for k in failed]

        results = self._fan_out(list(items), store)
        stored_on = {n for n in results}
        lost = [k for n, ks in self._by_server(list(items)).items() if n not in stored_on for k in ks]
        return [k for part in results.values() for k in part] + lost

    def _delete_many(self, keys: List[str]) -> None:
        self._fan_out(keys, lambda c, ks: c.delete_many(ks, noreply=False))

    def _clear(self, prefix: str) -> None:
        token = os.urandom(GEN_BYTES // 2).hex().encode()
        self._fan_out([self._gen_key()], lambda c, ks: c.set(ks[0], token, noreply=False))
        self._live_gen = token

    def _close(self) -> None:
        if self._live_conn is not None:
            for client in self._live_conn.values():
                client.close()
            self._live_conn = None
