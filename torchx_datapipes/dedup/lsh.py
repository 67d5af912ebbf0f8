"""Banded LSH over MinHash signatures: bands x rows from a threshold, band keys, candidate pairs.

Two texts of Jaccard similarity ``s`` agree on one signature column with probability ``s``, on a
band of ``r`` rows with ``s**r``, and share at least one of ``b`` band keys with
``P(s) = 1 - (1 - s**r)**b``. :func:`optimal_params` picks ``(b, r)`` with ``b * r <= num_perm``
minimising ``fp_weight * FP + fn_weight * FN``, where ``FP = integral of P over [0, t]`` and
``FN = integral of 1 - P over [t, 1]`` (datasketch's ``_optimal_param``; here integrated with a
fixed Simpson rule, no scipy). Every candidate pair is later verified by exact Jaccard, so a false
positive costs only a verification while a false negative is a duplicate that is never found:
the default weights are 0.05 / 0.95. With them, ``num_perm=112`` gives datatrove's 14 x 8 and the
default ``num_perm=128`` gives **16 x 8** for ``t = 0.8``: ``P(0.8) = 0.947``, ``P(0.85) = 0.994``,
``P(0.9) = 1.000``, mean recall 0.994 over pairs uniform in ``[0.8, 1]``, and ``P(0.5) = 0.061``,
``P(0.3) = 0.001`` candidates to verify. ``python -m torchx_datapipes.dedup.lsh 0.8`` prints the table.

Distributed use: a rank computes :func:`band_keys` for its records and sends each ``(key, id)``
to the rank that owns ``key`` (e.g. ``key % world_size``); that rank calls :func:`bucket_pairs`.
Keys and pairs depend only on the texts and ids, never on the split across ranks. A band key
folds in the band index, so one flat key space serves all bands. Ids here are int64 in input
order; pack ``(file index, line)`` ids into one integer (e.g. ``file << 40 | line``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from torchx_datapipes.dedup.minhash import EMPTY

__all__ = ["LSHParams", "band_keys", "bucket_pairs", "candidate_pairs", "optimal_params"]

_GRID = 2001  # Simpson points per integral: the objective is smooth; 2001 points is ~1e-9 exact
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x9E3779B97F4A7C15)
_C3 = np.uint64(0x94D049BB133111EB)


@dataclass(frozen=True)
class LSHParams:
    """``bands`` bands of ``rows`` signature columns each (uses the first ``bands * rows`` columns)."""

    bands: int
    rows: int

    def __post_init__(self) -> None:
        for name in ("bands", "rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"invalid LSH {name} {v!r}: expected an integer >= 1")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    def probability(self, similarity: float | np.ndarray) -> float | np.ndarray:
        """Probability that two texts of this Jaccard similarity become a candidate pair."""
        s = np.asarray(similarity, dtype=np.float64)
        p = 1.0 - (1.0 - s**self.rows) ** self.bands
        return float(p) if p.ndim == 0 else p


@functools.lru_cache(maxsize=64)
def optimal_params(
    threshold: float, num_perm: int = 128, fp_weight: float = 0.05, fn_weight: float = 0.95
) -> LSHParams:
    """The ``(bands, rows)`` with ``bands * rows <= num_perm`` minimising the weighted error areas.

    Ties are broken towards fewer bands, then fewer rows, so the choice is deterministic.
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"invalid threshold {threshold!r}: expected 0 < threshold < 1, e.g. 0.8")
    if isinstance(num_perm, bool) or not isinstance(num_perm, int) or num_perm < 1:
        raise ValueError(f"invalid num_perm {num_perm!r}: expected an integer >= 1, e.g. 128")
    if fp_weight < 0 or fn_weight < 0 or fp_weight + fn_weight <= 0:
        raise ValueError(f"invalid weights fp={fp_weight!r}, fn={fn_weight!r}: expected >= 0, not both 0")
    lo, hi = np.linspace(0.0, threshold, _GRID), np.linspace(threshold, 1.0, _GRID)
    best: tuple[float, LSHParams] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            p = LSHParams(bands, rows)
            fp = _simpson(np.asarray(p.probability(lo)), threshold)
            fn = _simpson(1.0 - np.asarray(p.probability(hi)), 1.0 - threshold)
            err = fp_weight * fp + fn_weight * fn
            if best is None or err < best[0] - 1e-15:
                best = (err, p)
    assert best is not None  # num_perm >= 1 gives at least (1, 1)
    return best[1]


def _simpson(y: np.ndarray, width: float) -> float:
    h = width / (len(y) - 1)
    return float(h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()))


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a bijection of uint64 with full avalanche (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x *= _C1
    x ^= x >> np.uint64(27)
    x *= _C3
    x ^= x >> np.uint64(31)
    return x


def band_keys(signatures: np.ndarray, params: LSHParams) -> np.ndarray:
    """``(n, bands)`` uint64 keys: equal keys mean (up to 2**-64 collisions) an equal band.

    ``key = mix(... mix(mix(seed_band) ^ row_0) ... ^ row_{r-1})``, with ``seed_band`` derived from
    the band index, so equal rows in different bands give different keys.

    Raises:
        ValueError: a signature is too short, or is a text without shingles (``EMPTY``): such texts
            have no near duplicates; drop them (``ShingleBatch.lengths == 0``) before LSH.
    """
    sig = np.asarray(signatures)
    if sig.ndim != 2 or sig.dtype != np.uint64 or sig.shape[1] < params.num_perm:
        raise ValueError(
            f"expected a (n, >= {params.num_perm}) uint64 signature matrix for {params.bands} x"
            f" {params.rows} bands, got shape {sig.shape} of {sig.dtype}; use MinHasher(num_perm="
            f"{params.num_perm}).signatures(batch)"
        )
    empty = np.flatnonzero(sig[:, 0] == EMPTY)
    if len(empty):
        raise ValueError(
            f"signature rows {empty[:5].tolist()} (of {len(empty)}) are texts without words, which have"
            " no near duplicates: drop them (ShingleBatch.lengths == 0) before LSH"
        )
    cube = sig[:, : params.num_perm].reshape(len(sig), params.bands, params.rows)
    seeds = np.arange(1, params.bands + 1, dtype=np.uint64) * _C2
    keys = np.broadcast_to(_mix64(seeds), (len(sig), params.bands)).copy()
    for j in range(params.rows):
        keys = _mix64(keys ^ cube[:, :, j])
    return keys


def bucket_pairs(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Every pair of distinct ids that share a key: ``(m, 2)`` int64, ``a < b``, unique, sorted.

    ``keys[i]`` belongs to ``ids[i]`` (flat, e.g. the ``(key, id)`` rows one rank received).
    A bucket of ``g`` ids gives ``g * (g - 1) / 2`` pairs.
    """
    keys, ids = np.asarray(keys, dtype=np.uint64).ravel(), np.asarray(ids, dtype=np.int64).ravel()
    if keys.shape != ids.shape:
        raise ValueError(f"keys and ids must have the same length, got {keys.shape} and {ids.shape}")
    if not len(keys):
        return np.empty((0, 2), dtype=np.int64)
    order = np.lexsort((ids, keys))
    k, i = keys[order], ids[order]
    fresh = np.r_[True, (k[1:] != k[:-1]) | (i[1:] != i[:-1])]  # drop repeated (key, id) rows
    k, i = k[fresh], i[fresh]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    sizes = np.diff(np.r_[starts, len(k)])
    parts = [np.empty((0, 2), dtype=np.int64)]
    for g in np.unique(sizes[sizes > 1]).tolist():
        left, right = np.triu_indices(g, 1)
        base = starts[sizes == g][:, None]
        parts.append(np.stack([i[base + left].ravel(), i[base + right].ravel()], axis=1))
    return np.unique(np.concatenate(parts), axis=0)


def candidate_pairs(keys: np.ndarray, ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Candidate pairs of one process's records: :func:`bucket_pairs` over all bands of ``keys``."""
    keys = np.asarray(keys, dtype=np.uint64)
    ids = np.asarray(ids, dtype=np.int64)
    if keys.ndim != 2 or len(keys) != len(ids):
        raise ValueError(f"expected (n, bands) keys and n ids, got {keys.shape} and {ids.shape}")
    return bucket_pairs(keys, np.broadcast_to(ids[:, None], keys.shape))


def _table(threshold: float) -> str:
    lines = [f"threshold {threshold}: bands x rows (num_perm budget), P(candidate | Jaccard s)"]
    grid = (0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9)
    lines.append(f"{'num_perm':>8} {'b x r':>7} " + " ".join(f"P({s})".rjust(8) for s in grid))
    for k in (64, 112, 128, 256):
        p = optimal_params(threshold, k)
        probs = " ".join(f"{p.probability(s):8.3f}" for s in grid)
        lines.append(f"{k:>8} {f'{p.bands}x{p.rows}':>7} {probs}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(_table(float(sys.argv[1]) if len(sys.argv) > 1 else 0.8))
