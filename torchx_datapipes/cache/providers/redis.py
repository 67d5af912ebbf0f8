"""``redis://[:password@]host:port/db``: a cache shared by every process that can reach Redis.

Every call is batched (``MGET``, ``MSET`` or one pipeline), because a GET loop manages
~20k keys/s on loopback while MGET of 1000 keys manages ~250k/s, ~570k/s with hiredis
and ~1M/s with RESP3 as well (../shared/DESIGN.md); RESP3 is used and hiredis is used when
installed. redis-py's defaults block 5 s per failed call, so timeouts are short (``timeout``,
0.5 s), retries are off and the base class's circuit breaker takes over. Clients cannot be
pickled; this class pickles its URL and options only and connects lazily per process.

Trust: anyone who can write to the server could plant a pickle, so pickled values are signed with
the per-user HMAC key (``~/.config/torchx_datapipes/cache-hmac.key``) unless ``pickle=`` or an
``hmac_key*`` option says otherwise; a value not signed with it is a miss, never unpickled.
"""

import urllib.parse
from typing import Any, Dict, List, Optional

from torchx_datapipes.cache.base import Cache
from torchx_datapipes.cache.providers import require
from torchx_datapipes.secrets import mask_url

_SCAN_COUNT = 1000


class RedisCache(Cache):
    """Redis (or Valkey / KeyDB) over the network.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]`` or ``rediss://...`` for TLS.
        **options: see :class:`~torchx_datapipes.cache.base.Cache`.
    """

    scheme = "redis"
    shared_store = True  # pickles signed with the per-user key by default
    default_max_value_bytes = 512 * 1024 * 1024  # Redis's own limit for a string value

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", **options: Any) -> None:
        super().__init__(**options)
        require("redis", "redis")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            raise ValueError(f"redis cache URL {mask_url(url)!r} is not valid: use redis://host:port/db")
        self.url = url

    @classmethod
    def from_url(cls, location: str, path: str, scheme: str = "redis", **options: Any) -> "RedisCache":
        return cls(f"{scheme}://{location}{path}", **options)

    def describe(self) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path or '/0'}"

    def _client(self) -> Any:
        if self._live_conn is None:
            redis = require("redis", "redis")
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._live_conn = redis.Redis.from_url(
                self.url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False,
                health_check_interval=0,
                protocol=3,
            )
        return self._live_conn

    def _get_many(self, keys: List[str]) -> Dict[str, bytes]:
        return {k: v for k, v in zip(keys, self._client().mget(keys)) if v is not None}

    def _set_many(self, items: Dict[str, bytes], ttl: Optional[float]) -> List[str]:
        import redis

        client = self._client()
        try:
            if ttl is None:
                client.mset(items)
                return []
            pipe = client.pipeline(transaction=False)
            ms = max(1, int(ttl * 1000))
            for k, v in items.items():
                pipe.set(k, v, px=ms)
            results = pipe.execute(raise_on_error=False)
        except redis.ResponseError:  # e.g. OOM under maxmemory noeviction: the server is up but refuses
            return list(items)
        return [k for k, r in zip(items, results) if isinstance(r, Exception) or not r]

    def _delete_many(self, keys: List[str]) -> None:
        self._client().unlink(*keys)

    def _clear(self, prefix: str) -> None:
        client, batch = self._client(), []
        for key in client.scan_iter(match=prefix + "*", count=_SCAN_COUNT):
            batch.append(key)
            if len(batch) >= _SCAN_COUNT:
                client.unlink(*batch)
                batch = []
        if batch:
            client.unlink(*batch)

    def _close(self) -> None:
        if self._live_conn is not None:
            self._live_conn.close()
            self._live_conn = None
