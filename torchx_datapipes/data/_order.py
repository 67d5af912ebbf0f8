"""The epoch order: a pure function of the chunks, seed, epoch, shuffle and shuffle_window.

Epoch position ``p`` (0 <= p < N) is served as record ``locate(p)``. Without shuffle, positions
are records in unit/part/row order. With shuffle, the chunks are permuted with
``numpy.random.default_rng([seed, epoch, 0])`` and concatenated; that sequence is cut into
windows of ``shuffle_window`` records, and window ``w`` is permuted exactly with
``default_rng([seed, epoch, 1, w])``. World size and worker counts never enter, and nothing of
size N is materialised: one window's permutation at a time.
"""

from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np


def distinct(values: np.ndarray) -> List[int]:
    """``np.unique(values).tolist()`` without ``np.unique``, whose first call in a process imports
    ``numpy.ma`` (numpy 2.4: ~0.1 s, paid by every DataLoader worker before its first batch)."""
    s = np.sort(np.asarray(values).ravel())
    if len(s) == 0:
        return []
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    out: List[int] = s[keep].tolist()
    return out


class EpochOrder:
    def __init__(
        self, chunk_sizes: Sequence[int], *, seed: int, epoch: int, shuffle: bool, window: int
    ) -> None:
        sizes = np.asarray(chunk_sizes, dtype=np.int64)
        self.n = int(sizes.sum())
        self.shuffle, self.window = shuffle, window
        self.seed, self.epoch = seed, epoch
        if shuffle:
            self.chunk_of_seq = np.random.default_rng([seed, epoch, 0]).permutation(len(sizes))
        else:
            self.chunk_of_seq = np.arange(len(sizes))
        self.seq_starts = np.concatenate([[0], np.cumsum(sizes[self.chunk_of_seq])]).astype(np.int64)
        self._perm: Optional[Tuple[int, np.ndarray]] = None

    def _boundaries(self, a: int, b: int) -> Iterator[int]:
        if self.shuffle:
            yield from range((a // self.window + 1) * self.window, b, self.window)
        else:
            lo, hi = np.searchsorted(self.seq_starts, [a, b], side="right")
            yield from (int(x) for x in self.seq_starts[lo:hi] if a < x < b)

    def segments(self, a: int, b: int) -> Iterator[Tuple[int, int]]:
        """``[a, b)`` cut where windows (shuffle) or chunks (no shuffle) begin."""
        start = a
        for cut in self._boundaries(a, b):
            yield start, cut
            start = cut
        if start < b:
            yield start, b

    def _window_perm(self, w: int) -> np.ndarray:
        if self._perm is None or self._perm[0] != w:
            size = min(self.window, self.n - w * self.window)
            self._perm = (w, np.random.default_rng([self.seed, self.epoch, 1, w]).permutation(size))
        return self._perm[1]

    def locate(self, a: int, b: int) -> Tuple[np.ndarray, np.ndarray]:
        """``(chunk ids, rows within the chunk)`` of positions ``[a, b)`` of one segment."""
        if self.shuffle:
            w = a // self.window
            base = w * self.window
            seq = base + self._window_perm(w)[a - base : b - base]
        else:
            seq = np.arange(a, b, dtype=np.int64)
        ci = np.searchsorted(self.seq_starts, seq, side="right") - 1
        return self.chunk_of_seq[ci], seq - self.seq_starts[ci]
