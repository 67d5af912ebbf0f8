"""Text normalisation and word n-gram shingles, hashed to stable 64-bit integers.

The rules (issue 30), shared by near-duplicate detection and decontamination:

* **words**: ``text.lower()``, then the runs of ``\\w`` (Python's Unicode ``\\w``: letters, digits,
  ``_``). Punctuation and whitespace only separate words. No Unicode normalisation is applied,
  so NFD text splits at combining marks; normalise upstream if the corpus mixes forms.
* **shingles**: the *set* of word n-grams, each the words joined by one space. A text of fewer
  than ``n`` words (but at least one) has one shingle: all its words, so short texts are near
  duplicates only of texts with the same words in the same order. A text without words has no
  shingles and is never a near duplicate of anything (exact dedup still sees it).
* **hash**: ``xxh3_64`` (seed 0) of the shingle's UTF-8 bytes. XXH3's output is frozen since
  xxHash 0.8.0, so hashes are equal in every process, machine and run; Python's ``hash()`` is
  salted per process and is never used.

Non-goals: no tokeniser, stemming, stop words or language detection.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

__all__ = ["ShingleBatch", "ngrams", "shingle_hashes", "words"]

_WORD = re.compile(r"\w+")
_EMPTY = np.empty(0, dtype=np.uint64)


def words(text: str) -> list[str]:
    """The lowercase ``\\w+`` runs of ``text``, in order."""
    if not isinstance(text, str):
        raise TypeError(
            f"expected the text field to be a str, got {type(text).__name__}: {text!r:.80}."
            " Convert it in a transform, or choose a text --field."
        )
    return _WORD.findall(text.lower())


def ngrams(tokens: Sequence[str], n: int, short: str = "words") -> list[str]:
    """The word n-grams of ``tokens`` (with repeats, in order). Fewer than ``n`` words: with
    ``short="words"`` (near dedup) the words themselves (issue 30: "a text shorter than n words: its
    words"), so two short texts that share most of their words are near duplicates; with
    ``short="whole"`` (decontamination) one n-gram of all of them, so a short reference record
    matches only an input that holds its whole text, never one that shares a single word."""
    check_ngram(n)
    if len(tokens) < n:
        if short == "words":
            return list(tokens)
        return [" ".join(tokens)] if tokens else []
    return [" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def shingle_hashes(text: str, n: int) -> np.ndarray:
    """Sorted, unique uint64 hashes of the shingle set of ``text`` (empty if it has no words)."""
    grams = ngrams(words(text), n)
    if not grams:
        return _EMPTY
    h = xxhash.xxh3_64_intdigest
    return np.unique(np.fromiter((h(g.encode()) for g in grams), dtype=np.uint64, count=len(grams)))


def check_ngram(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"invalid n-gram size {n!r}: expected an integer >= 1, e.g. --ngram 5")
    return int(n)


@dataclass(frozen=True, eq=False)
class ShingleBatch:
    """The shingle sets of a batch of texts in one flat array (CSR layout), for vectorised kernels.

    Row ``i`` is ``values[offsets[i]:offsets[i + 1]]``, sorted and unique. Rows are independent of
    each other, so any split of a corpus into batches gives the same rows.
    """

    values: np.ndarray  # uint64, all rows concatenated
    offsets: np.ndarray  # int64, len(batch) + 1, offsets[0] == 0

    def __post_init__(self) -> None:
        if self.values.dtype != np.uint64 or self.offsets.dtype != np.int64 or self.offsets.ndim != 1:
            raise TypeError(
                f"ShingleBatch needs uint64 values and 1-d int64 offsets, got {self.values.dtype} and"
                f" {self.offsets.dtype}; build it with ShingleBatch.from_texts or from_rows"
            )
        if len(self.offsets) == 0 or self.offsets[0] != 0 or self.offsets[-1] != len(self.values):
            raise ValueError(
                f"offsets must start at 0 and end at len(values)={len(self.values)}, got"
                f" {self.offsets[:1].tolist()}...{self.offsets[-1:].tolist()}"
            )

    @classmethod
    def from_rows(cls, rows: Iterable[np.ndarray]) -> ShingleBatch:
        """A batch of already hashed rows (each sorted and unique, as from :func:`shingle_hashes`)."""
        rows = list(rows)
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.concatenate(rows).astype(np.uint64, copy=False) if rows else _EMPTY
        return cls(values, offsets)

    @classmethod
    def from_texts(cls, texts: Iterable[str], n: int) -> ShingleBatch:
        """Shingle and hash every text (see the module docstring for the rules)."""
        return cls.from_rows(shingle_hashes(t, n) for t in texts)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of shingles per row (0 for a text without words)."""
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def select(self, mask_or_index: np.ndarray) -> ShingleBatch:
        """The sub-batch of the rows picked by a boolean mask or an index array."""
        index = np.arange(len(self))[mask_or_index]
        return ShingleBatch.from_rows(self.row(int(i)) for i in index)
