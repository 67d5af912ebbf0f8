"""Turn user keys into bounded, backend-safe strings: ``namespace:version:blake2b(key)``.

Every backend sees at most ~120 ASCII bytes with no whitespace, so memcached's
250-byte / no-whitespace / no-NUL key rules can never bite, whatever the user's key is.
The key bytes are a type-tagged, deterministic encoding (not ``hash()``, which is salted
per process, and not pickle, whose bytes can change between versions), so every process,
rank and later job derives the same stored key from the same user key.
"""

import hashlib
import re
import struct
from typing import Any, Dict, Hashable, List, Sequence

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
DIGEST_BYTES = 20
_LEN = struct.Struct("<Q")


def check_name(what: str, value: str) -> str:
    """Validate a namespace or version: 1-64 characters of ``A-Z a-z 0-9 _ . -``."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(
            f"cache {what} {value!r} is not valid: use 1-64 characters from A-Z a-z 0-9 _ . -"
            f" (e.g. {what}=my_dataset)"
        )
    return value


def key_bytes(key: Hashable) -> bytes:
    """A deterministic byte encoding of ``key`` that differs for keys of different types.

    Accepts ``bytes``, ``str``, ``int``, ``float``, ``bool``, ``None`` and tuples of those
    (hashable values only: they are also dict keys in ``get_many``'s result).
    """
    out = bytearray()
    _encode(key, out)
    return bytes(out)


def _encode(key: Any, out: bytearray) -> None:
    if isinstance(key, bool) or key is None:
        out += b"n" if key is None else (b"T" if key else b"F")
    elif isinstance(key, bytes):
        out += b"b" + struct.pack("<Q", len(key)) + key
    elif isinstance(key, str):
        raw = key.encode("utf-8", "surrogatepass")
        out += b"s" + struct.pack("<Q", len(raw)) + raw
    elif isinstance(key, int):
        raw = str(key).encode()
        out += b"i" + struct.pack("<Q", len(raw)) + raw
    elif isinstance(key, float):
        out += b"f" + struct.pack("<d", key)
    elif isinstance(key, tuple):
        out += b"t" + struct.pack("<Q", len(key))
        for part in key:
            _encode(part, out)
    else:
        raise TypeError(
            f"cache key {key!r} of type {type(key).__name__} is not supported: use str, bytes, int,"
            " float, bool, None or a tuple of those (pass key_fn= to derive one from your item)"
        )


def stored_key(prefix: str, key: Hashable) -> str:
    """``prefix`` (``namespace:version:``) + the blake2b hex digest of the key's bytes."""
    return prefix + hashlib.blake2b(key_bytes(key), digest_size=DIGEST_BYTES).hexdigest()


def stored_keys(prefix: str, keys: Sequence[Hashable]) -> List[str]:
    """:func:`stored_key` of each key, with fast paths for plain ``str``, ``int`` and ``bytes`` keys.

    The fast paths produce exactly the bytes of :func:`key_bytes` (checked by the tests).
    """
    out: List[str] = []
    append, pack, blake = out.append, _LEN.pack, hashlib.blake2b
    for key in keys:
        t = type(key)
        if t is str:
            raw = key.encode("utf-8", "surrogatepass")  # type: ignore[attr-defined]
            data = b"s" + pack(len(raw)) + raw
        elif t is int:
            raw = str(key).encode()
            data = b"i" + pack(len(raw)) + raw
        elif t is bytes:
            data = b"b" + pack(len(key)) + key  # type: ignore[arg-type,operator]
        else:
            data = key_bytes(key)
        append(prefix + blake(data, digest_size=DIGEST_BYTES).hexdigest())
    return out


def raise_equal_keys(keys: List[Any]) -> None:
    """Keys such as ``1``, ``1.0`` and ``True`` are different cache keys but one dict key."""
    seen: Dict[Any, Any] = {}
    for k in keys:
        if k in seen:
            raise ValueError(
                f"cache keys {seen[k]!r} and {k!r} are equal in Python but are different cache keys;"
                " a dict cannot hold both, so ask for them in separate calls (or use one key type)"
            )
        seen[k] = k
