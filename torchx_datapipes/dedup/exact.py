"""Exact-duplicate keys (``--method exact``) and the keep rule over them.

A record's key is the SHA-256 of its field's bytes: a ``str`` as UTF-8, ``bytes`` as they are.
``ExactMode.NORMALIZED`` hashes the words instead (lowercase ``\\w+`` runs joined by one space,
the same normalisation as the shingles), so ``"Hello,  world!"`` equals ``"hello world"``.

Distributed use: send ``(key, id)`` to the rank owning the key (e.g. the first 8 key bytes as a
little-endian integer, modulo the world size); that rank calls :func:`first_ids` on what it received.
Keys are 32 raw bytes (numpy ``S32``), so they sort, compare and travel as fixed-width values.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence

import numpy as np

from torchx_datapipes.dedup.shingles import words

__all__ = ["ExactMode", "exact_keys", "first_ids"]


class ExactMode(str, enum.Enum):
    """What "identical" means: ``bytes`` = the field's exact bytes, ``normalized`` = its words."""

    BYTES = "bytes"
    NORMALIZED = "normalized"


def _payload(value: str | bytes, mode: ExactMode, index: int) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        if mode is ExactMode.BYTES:
            return bytes(value)
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(
                f"record {index}: the field is bytes that are not UTF-8 ({e}); normalized mode needs"
                " text: use mode bytes, or decode the field in a transform"
            ) from e
    if not isinstance(value, str):
        raise TypeError(
            f"record {index}: exact dedup needs a str or bytes field, got {type(value).__name__}:"
            f" {value!r:.80}. Choose a text --field, or convert the value in a transform."
        )
    return (" ".join(words(value)) if mode is ExactMode.NORMALIZED else value).encode("utf-8")


def exact_keys(values: Sequence[str | bytes], mode: ExactMode | str = ExactMode.BYTES) -> np.ndarray:
    """The ``S32`` SHA-256 key of each value; equal keys mean identical values (in ``mode``)."""
    mode = ExactMode(mode)
    digests = [hashlib.sha256(_payload(v, mode, i)).digest() for i, v in enumerate(values)]
    return np.array(digests, dtype="S32") if digests else np.empty(0, dtype="S32")


def first_ids(keys: np.ndarray, ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """For each row, the smallest id with the same key: its representative (keep where equal).

    Returns int64 aligned with ``keys``; the same for any order or split of the rows that keeps
    all rows of a key together.
    """
    keys, ids = np.asarray(keys), np.asarray(ids, dtype=np.int64)
    if keys.shape != ids.shape or keys.ndim != 1:
        raise ValueError(f"expected 1-d keys and ids of the same length, got {keys.shape} and {ids.shape}")
    order = np.lexsort((ids, keys))
    k = keys[order]
    starts = np.r_[True, k[1:] != k[:-1]] if len(k) else np.empty(0, dtype=bool)
    group = np.cumsum(starts) - 1
    first = ids[order][starts]
    out = np.empty_like(ids)
    out[order] = first[group]
    return out
