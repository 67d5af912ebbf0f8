"""Decontamination: find input records that share a word n-gram with a reference corpus.

N-grams follow the shingle rules of :mod:`~torchx_datapipes.dedup.shingles` (lowercase ``\\w+``
words, n-grams joined by one space, a text of fewer than ``n`` words is one n-gram of all its
words). Unlike near-dedup, a hash collision here would silently delete a record, and a
1e12-n-gram input against a 1e7-n-gram reference would expect about one 64-bit collision; keys are
therefore 128-bit (``xxh3_128`` digests, numpy ``S16``), which makes a collision negligible.

:class:`NgramIndex` holds each distinct reference n-gram once, sorted, with the smallest reference
id that contains it (24 bytes per n-gram). Indexes built on disjoint parts of the reference
:meth:`~NgramIndex.merge` into the same index in any order, so ranks can build and combine them.
A match names the smallest reference id sharing an n-gram with the input, which therefore does
not depend on how the reference or the input was split.

Non-goals: no fuzzy or partial n-gram matching, and no per-benchmark ``n``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from torchx_datapipes.dedup.shingles import check_ngram, ngrams, words

__all__ = ["DecontamMatch", "NgramIndex"]


@dataclass(frozen=True)
class DecontamMatch:
    """Why an input record is contaminated."""

    ref_id: int  # the smallest reference id sharing an n-gram with the input
    ngram: str  # the input's first n-gram (in text order) that this reference contains
    shared: int  # distinct input n-grams found anywhere in the reference corpus


def _grams_and_keys(text: str, n: int) -> tuple[list[str], np.ndarray]:
    grams = list(dict.fromkeys(ngrams(words(text), n, short="whole")))
    digest = xxhash.xxh3_128_digest
    keys = np.array([digest(g.encode()) for g in grams], dtype="S16") if grams else np.empty(0, "S16")
    return grams, keys


class NgramIndex:
    """The distinct n-grams of a reference corpus, for :meth:`match`."""

    def __init__(self, n: int, keys: np.ndarray, ref_ids: np.ndarray) -> None:
        """Prefer :meth:`build`; ``keys`` (``S16``) may be unsorted and repeated."""
        self.n = check_ngram(n)
        keys, ref_ids = np.asarray(keys, dtype="S16"), np.asarray(ref_ids, dtype=np.int64)
        if keys.shape != ref_ids.shape or keys.ndim != 1:
            raise ValueError(f"keys and ref_ids must be 1-d of one length, got {keys.shape}, {ref_ids.shape}")
        order = np.lexsort((ref_ids, keys))
        keys, ref_ids = keys[order], ref_ids[order]
        first = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.empty(0, dtype=bool)
        self.keys: np.ndarray = keys[first]
        self.ref_ids: np.ndarray = ref_ids[first]

    @classmethod
    def build(cls, ids: Iterable[int], texts: Iterable[str], n: int = 13) -> NgramIndex:
        """The index of reference records ``texts`` with ids ``ids`` (ints, e.g. in input order)."""
        check_ngram(n)
        keys: list[np.ndarray] = []
        owners: list[np.ndarray] = []
        for ref_id, text in zip(ids, texts, strict=True):
            k = _grams_and_keys(text, n)[1]
            keys.append(k)
            owners.append(np.full(len(k), ref_id, dtype=np.int64))
        if not keys:
            return cls(n, np.empty(0, "S16"), np.empty(0, np.int64))
        return cls(n, np.concatenate(keys), np.concatenate(owners))

    def merge(self, other: NgramIndex) -> NgramIndex:
        """The index of both reference parts (associative and commutative)."""
        if other.n != self.n:
            raise ValueError(f"cannot merge n-gram indexes of n={self.n} and n={other.n}: rebuild with one n")
        return NgramIndex(self.n, np.r_[self.keys, other.keys], np.r_[self.ref_ids, other.ref_ids])

    def __len__(self) -> int:
        return len(self.keys)

    def match(self, text: str) -> DecontamMatch | None:
        """The reference match of one input text, or ``None`` if it shares no n-gram."""
        grams, keys = _grams_and_keys(text, self.n)
        if not len(keys) or not len(self.keys):
            return None
        pos = np.searchsorted(self.keys, keys)
        pos[pos == len(self.keys)] = 0
        hit = np.flatnonzero(self.keys[pos] == keys)
        if not len(hit):
            return None
        refs = self.ref_ids[pos[hit]]
        best = int(refs.min())
        first = int(hit[np.argmax(refs == best)])
        return DecontamMatch(ref_id=best, ngram=grams[first], shared=len(hit))

    def match_batch(self, texts: Sequence[str]) -> list[DecontamMatch | None]:
        """:meth:`match` for each text (``None``: keep the record)."""
        return [self.match(t) for t in texts]
