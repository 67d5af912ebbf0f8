"""``transform --cache URL``: memoize the user's per-record function in a shared cache.

The key of a record is (artifact sha256, the record's exact bytes), so the same
function on the same record hits from any rank, worker or later job, and a changed
function (a new sha256) never sees the old results. Each batch costs one ``get_many`` and
one ``set_many``. Failures follow the cache's policy: a cache that is down or slow only
means the function runs, never that the job fails or that a wrong value is written.
Exceptions raised by the function are not cached (the record goes through ``on_error``
again on the next run).
"""

import pickle
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import orjson

from torchx_datapipes.cache import Cache, CacheStats, open_cache
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.kinds import FnKind
from torchx_datapipes.secrets import mask_url, resolve

# orjson would turn datetimes, dataclasses and str/int subclasses into plain JSON values that
# collide with real strings/dicts; passing them through makes it raise, and pickle takes over.
_OPTS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def record_bytes(rec: Any) -> bytes:
    """Exact bytes of a record: two records get the same bytes only if they are equal.

    JSON (fast) in the record's own key order -- a reordered record is a different key, since
    the function may see the order -- or pickle where JSON would be lossy: values JSON cannot
    hold, and ``null``, which orjson also writes for NaN and Infinity. Equal records can get
    different bytes (a miss), never the reverse (a wrong hit).
    """
    try:
        data = orjson.dumps(rec, option=_OPTS)
    except TypeError:
        return b"p" + pickle.dumps(rec, protocol=5)
    return b"j" + data if b"null" not in data else b"p" + pickle.dumps(rec, protocol=5)


def materialize(result: Any) -> Any:
    """Generators cannot be stored: turn a flat-map generator into a list."""
    return list(result) if isinstance(result, Iterator) else result


class Memo:
    """The per-record memo of one transform job."""

    def __init__(self, url: str, sha256: str, kind: FnKind, fn_label: str) -> None:
        if kind is not FnKind.RECORD:
            raise ValueError(
                f"--cache memoizes per-record functions, but {fn_label} is a {kind.value} function;"
                " drop --cache, or cache inside the function (torchx_datapipes.cache.open_cache)"
            )
        if len(sha256) != 64:
            raise ValueError(f"--cache needs the artifact's 64-hex-digit sha256, got {sha256!r}")
        self.cache: Cache = _open(url)
        self.sha256 = sha256

    def keys(self, recs: Sequence[Any]) -> List[bytes]:
        """One bytes key per record: the artifact's sha256 (64 hex digits, fixed length) + the record."""
        prefix = self.sha256.encode()
        return [prefix + record_bytes(r) for r in recs]

    def lookup(self, keys: Sequence[bytes]) -> Dict[int, Any]:
        """Cached results by position in the batch."""
        found = self.cache.get_many(keys)
        return {i: found[k] for i, k in enumerate(keys) if k in found}

    def store(self, fresh: List[Tuple[bytes, Any]]) -> None:
        if fresh:
            self.cache.set_many(fresh)

    def stats(self) -> CacheStats:
        return self.cache.stats()


def _open(url: str) -> Cache:
    """Open the cache, with the password restored from the job's environment or credentials file.

    Messages are masked and not chained: the original exception would print the full URL.
    """
    try:
        return open_cache(resolve(url))
    except (ValueError, TypeError, ImportError) as e:
        raise type(e)(mask_url(str(e))) from None


def stats_delta(before: CacheStats, after: CacheStats) -> Dict[str, int]:
    a, b = after.as_dict(), before.as_dict()
    return {k: a[k] - b[k] for k in a}


def summarize(memo: "Optional[Memo]", metas: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The manifest's ``cache`` section: where (no credentials), and the counters of every unit."""
    if memo is None:
        return None
    total = CacheStats()
    for m in metas:
        total = total + CacheStats.from_dict(m.get(ms.CACHE) or {})
    return {"url": memo.cache.describe(), "namespace": memo.cache.namespace, **total.as_dict()}
