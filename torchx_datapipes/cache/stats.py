"""Per-process cache counters, summable across workers and ranks."""

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict


@dataclass
class CacheStats:
    """What one process's cache did. ``a + b`` merges the counters of two processes.

    Attributes:
        hits / misses: keys found / not found by ``get*`` (errors and bypassed calls are misses).
        errors: backend calls that failed or timed out (each one a miss or a lost write).
        bypassed: calls not sent because the circuit breaker was open.
        decode_errors: stored values that failed to decode (treated as misses and deleted).
        untrusted: stored pickles that the cache's trust does not cover (``pickle=false``, no
            or a wrong HMAC): never unpickled, treated as misses and deleted.
        encode_errors: values that could not be encoded (e.g. unpicklable; not stored).
        sets: values stored. rejected: values not stored because the server refused them (or,
            with several memcached servers, because their server was down).
        oversize: values not stored because they exceed ``max_value_bytes``.
        bytes_read / bytes_written: encoded bytes moved.
        breaker_opens: times a circuit breaker opened (memcached: one breaker per server).
    """

    hits: int = 0
    misses: int = 0
    errors: int = 0
    bypassed: int = 0
    decode_errors: int = 0
    untrusted: int = 0
    encode_errors: int = 0
    sets: int = 0
    rejected: int = 0
    oversize: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    breaker_opens: int = 0

    def __add__(self, other: "CacheStats") -> "CacheStats":
        return CacheStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in _FIELDS})

    def as_dict(self) -> Dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "CacheStats":
        return cls(**{f.name: int(d.get(f.name, 0)) for f in _FIELDS})

    @property
    def bytes(self) -> int:
        """Encoded bytes moved in either direction (``bytes_read + bytes_written``)."""
        return self.bytes_read + self.bytes_written

    def __getitem__(self, name: str) -> int:
        """``stats["hits"]`` works as well as ``stats.hits``."""
        if name == "bytes" or name in _NAMES:
            return int(getattr(self, name))
        raise KeyError(f"{name!r}; CacheStats fields: {', '.join(_NAMES)}, bytes")

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


_FIELDS = dataclasses.fields(CacheStats)
_NAMES = tuple(f.name for f in _FIELDS)
