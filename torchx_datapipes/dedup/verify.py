"""Exact Jaccard similarity of candidate pairs over their shingle-hash sets.

MinHash only estimates similarity; every candidate pair is checked here against the real sets, so
a verified pair has ``|A & B| / |A | B| >= threshold`` exactly (up to 64-bit shingle-hash
collisions, ~``|A| * |B| / 2**64``). Two texts without words have similarity 0, not 1: they are
never near duplicates (exact dedup handles them).

Distributed use: a pair can be verified wherever both shingle sets are; route each pair to the
rank of its smaller id and send the shingle rows there. The result depends only on the pair.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["jaccard", "pair_jaccard", "verify_pairs"]


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted, unique uint64 arrays (0.0 if both are empty)."""
    if len(a) > len(b):
        a, b = b, a
    if len(a) == 0:
        return 0.0
    pos = np.searchsorted(b, a)
    pos[pos == len(b)] = 0
    inter = int(np.count_nonzero(b[pos] == a))
    return inter / (len(a) + len(b) - inter)


def pair_jaccard(pairs: np.ndarray, shingles: Mapping[int, np.ndarray]) -> np.ndarray:
    """Jaccard similarity (float64) of each ``(a, b)`` row of ``pairs``; ``shingles[id]`` is a row.

    Raises:
        KeyError: an id of a pair has no shingle row; send both rows to the verifying rank.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    out = np.empty(len(pairs), dtype=np.float64)
    try:
        for k, (a, b) in enumerate(pairs.tolist()):
            out[k] = jaccard(shingles[a], shingles[b])
    except KeyError as e:
        raise KeyError(
            f"no shingle row for id {e.args[0]!r} of a candidate pair: the verifier needs the rows of"
            " both ids of every pair it is given"
        ) from e
    return out


def verify_pairs(pairs: np.ndarray, shingles: Mapping[int, np.ndarray], threshold: float) -> np.ndarray:
    """Boolean mask of the pairs whose exact Jaccard similarity is ``>= threshold``."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"invalid threshold {threshold!r}: expected 0 < threshold <= 1, e.g. 0.8")
    return pair_jaccard(pairs, shingles) >= threshold
