"""Exact-count splits (``method=exact``), identical for any number of ranks and workers.

The counting pass gives every unit's record count (and per-class counts when stratified), so
every record has a *global index*: ``offset(unit) + position in unit`` (or, stratified, its index
among the records of its class). A seeded pseudo-random bijection ``pi`` of ``range(N)`` maps
that index to a rank, and the split is decided by where the rank falls among the cumulative
largest-remainder counts: ranks ``[0, c_0)`` are split 0, ``[c_0, c_0 + c_1)`` split 1, ...

``pi`` is a Feistel network over the next power of two with cycle walking (the
format-preserving-encryption construction): construction is O(1), evaluating it is a few
vectorised numpy passes per batch, and it needs no O(N) table, so each worker process builds its
assigner in O(units) time (~1 ms for 10M records in 1,000 units) instead of materialising an 80 MB
``np.random.permutation(N)`` (~0.1-1 s). It is a
pseudo-random permutation, not a uniform draw from all ``N!`` orders; for choosing which records
go where, its quality is far beyond what a split needs (see the tests for uniformity checks).

Non-goal: exact counts do not keep groups together (``--key`` is ignored); use ``method=hash``
when duplicates or a user's sessions must share a split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xxhash

from torchx_datapipes.errors import InputError
from torchx_datapipes.split.fractions import Fractions, largest_remainder
from torchx_datapipes.split.hashing import check_seed
from torchx_datapipes.split.stratified import class_counts_table, small_class_warnings

__all__ = ["ExactAssigner"]

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fast, well-distributed 64-bit mixer (wrapping multiplies)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


class _Permutations:
    """A family of seeded bijections ``pi_j`` of ``range(n_j)``, evaluated elementwise in one pass.

    Each is an alternating (unbalanced) Feistel network on the smallest power of two >= n_j, plus
    cycle walking: a round XORs one half with a keyed hash of the other, which is invertible
    whatever the halves' widths, and a domain < 2 n_j keeps walks short. Evaluating all classes
    of a batch together keeps the number of numpy calls per batch independent of the classes.
    """

    ROUNDS = 8
    _N, _SHIFT, _LOW, _HIGH, _KEYS = 0, 1, 2, 3, 4

    def __init__(self, sizes: Sequence[int], keys: Sequence[int]) -> None:
        bits = np.array([max(1, (n - 1).bit_length()) for n in sizes], dtype=np.uint64)
        low = (bits + np.uint64(1)) // np.uint64(2)
        one = np.uint64(1)
        columns = [np.array(sizes, dtype=np.uint64), low, (one << low) - one, (one << (bits - low)) - one]
        base = np.array(keys, dtype=np.uint64)
        columns += [_mix(base ^ np.uint64(0x9E3779B97F4A7C15 * (r + 1) % 2**64)) for r in range(self.ROUNDS)]
        self._table = np.stack(columns, axis=1).reshape(len(sizes), 4 + self.ROUNDS)

    def __call__(self, x: np.ndarray, which: np.ndarray | int) -> np.ndarray:
        """``pi_which(x)``; ``which`` is one index for all of ``x`` or one per element."""
        params = self._table[which]
        y = self._encrypt(x, params)
        todo = np.flatnonzero(y >= params[..., self._N])
        while todo.size:  # cycle walking: re-encrypt until back in range(n); expected < 2 steps
            sub = params if params.ndim == 1 else params[todo]
            y[todo] = self._encrypt(y[todo], sub)
            todo = todo[y[todo] >= sub[..., self._N]]
        return y

    def _encrypt(self, x: np.ndarray, p: np.ndarray) -> np.ndarray:
        shift, low_mask, high_mask = p[..., self._SHIFT], p[..., self._LOW], p[..., self._HIGH]
        high, low = x >> shift, x & low_mask
        for r in range(self.ROUNDS):
            k = p[..., self._KEYS + r]
            if r % 2:
                high = high ^ (_mix(low ^ k) & high_mask)
            else:
                low = low ^ (_mix(high ^ k) & low_mask)
        return (high << shift) | low


@dataclass
class _Cursor:
    """Stratified progress through one unit: next position and records seen per class code."""

    next_start: int = 0
    seen: dict[int, int] = field(default_factory=dict)


class ExactAssigner:
    """Exact per-split (and per-class) counts, chosen by a seeded permutation of the global index.

    Args:
        unit_counts: for every unit in input order, its record count, or (stratified) a mapping of
            class -> count. Identical on every rank: it comes from the counting pass.
        fractions: the splits.
        seed: permutation seed; a different seed gives a different (still exact) split.
        stratified: split each class separately so per-class counts are exact too.
    """

    def __init__(
        self,
        unit_counts: Sequence[int] | Sequence[Mapping[str, int]],
        fractions: Fractions,
        seed: int,
        stratified: bool = False,
    ) -> None:
        self.fractions, self.seed, self.stratified = fractions, check_seed(seed), stratified
        per_unit = [_unit_total(c, i, stratified) for i, c in enumerate(unit_counts)]  # type: ignore[arg-type]
        self._unit_sizes = np.array(per_unit, dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(self._unit_sizes)]).astype(np.uint64)
        self.total = int(self._offsets[-1])
        self._counts = largest_remainder(self.total, fractions)
        self._class_counts: dict[str, tuple[int, ...]] = {}
        self._cursors: dict[int, _Cursor] = {}
        if stratified:
            self._init_classes(unit_counts)  # type: ignore[arg-type]
        else:
            self._cum = np.cumsum(self._counts[:-1], dtype=np.uint64)
            self._perms = _Permutations([self.total], [xxhash.xxh3_64_intdigest(b"exact", self.seed)])

    def _init_classes(self, unit_counts: Sequence[Mapping[str, int]]) -> None:
        totals: dict[str, int] = {}
        for counts in unit_counts:
            for c, k in counts.items():
                totals[c] = totals.get(c, 0) + k
        self._code = {c: i for i, c in enumerate(sorted(totals))}
        running = [0] * len(self._code)
        self._unit_classes: list[dict[int, int]] = []
        self._class_offsets: list[dict[int, int]] = []
        for counts in unit_counts:
            coded = {self._code[c]: k for c, k in counts.items()}
            self._unit_classes.append(coded)
            self._class_offsets.append({i: running[i] for i in coded})
            for i, k in coded.items():
                running[i] += k
        for c in self._code:
            self._class_counts[c] = largest_remainder(totals[c], self.fractions)
        k = len(self.fractions)
        counts_table = np.array(list(self._class_counts.values()), dtype=np.uint64).reshape(-1, k)
        self._class_cum = np.cumsum(counts_table, axis=1)[:, :-1]
        self._counts = tuple(int(x) for x in counts_table.sum(axis=0))
        keys = [xxhash.xxh3_64_intdigest(b"exact-class:" + c.encode(), self.seed) for c in self._code]
        self._perms = _Permutations([totals[c] for c in self._code], keys)

    def split_counts(self) -> dict[str, Any]:
        """``{"total": N, "splits": {name: count}}`` plus ``"classes": {class: {name: count}}``."""
        return class_counts_table(
            self.fractions, self.total, self._counts, self._class_counts, self.stratified
        )

    def warnings(self) -> list[str]:
        """Splits (or, stratified, classes) too small to get a record in every split."""
        return small_class_warnings(self.fractions, self.total, self._counts, self._class_counts)

    def assign(self, unit_index: int, start: int, classes: Sequence[str] | None, n: int) -> np.ndarray:
        """Split ids for records ``[start, start + n)`` of unit ``unit_index``, in order.

        Stratified: ``classes[i]`` is the class of record ``start + i`` (see ``class_labels``), and
        a unit's batches must be assigned in order from ``start=0`` (units may interleave, and
        restarting a unit at 0 is allowed, e.g. after a retry).

        Raises:
            InputError: the unit holds more records (or other classes) than the counting pass saw.
        """
        self._check_range(unit_index, start, n)
        if not self.stratified:
            index = self._offsets[unit_index] + np.uint64(start) + np.arange(n, dtype=np.uint64)
            split = np.searchsorted(self._cum, self._perms(index, 0), side="right")
            return split.astype(self.fractions.split_dtype)
        if classes is None or len(classes) != n:
            got = "None" if classes is None else f"{len(classes)} classes"
            raise ValueError(f"stratified assign needs one class per record: n={n} but got {got}")
        return self._assign_stratified(unit_index, start, classes)

    def _assign_stratified(self, unit_index: int, start: int, classes: Sequence[str]) -> np.ndarray:
        cursor = self._cursor(unit_index, start)
        try:
            codes = np.fromiter((self._code[c] for c in classes), dtype=np.intp, count=len(classes))
        except KeyError as e:
            raise self._changed(unit_index, str(e.args[0]), 0) from None
        uniq, inverse, sizes = np.unique(codes, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        base = np.empty(len(uniq), dtype=np.uint64)
        expected, offsets = self._unit_classes[unit_index], self._class_offsets[unit_index]
        for j, (code, size) in enumerate(zip(uniq.tolist(), sizes.tolist(), strict=False)):
            seen = cursor.seen.get(code, 0)
            if seen + size > expected.get(code, 0):
                raise self._changed(
                    unit_index, next(c for c, i in self._code.items() if i == code), expected.get(code, 0)
                )
            base[j] = offsets[code] + seen
        for code, size in zip(uniq.tolist(), sizes.tolist(), strict=False):
            cursor.seen[code] = cursor.seen.get(code, 0) + size
        # index of each record among its class's records in this batch
        first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rank = np.empty(len(codes), dtype=np.uint64)
        rank[np.argsort(inverse, kind="stable")] = np.arange(len(codes)) - np.repeat(first, sizes)
        ranks = self._perms(base[inverse] + rank, codes)
        split = (ranks[:, None] >= self._class_cum[codes]).sum(axis=1)
        cursor.next_start = start + len(classes)
        if cursor.next_start == int(self._unit_sizes[unit_index]):
            del self._cursors[unit_index]
        return split.astype(self.fractions.split_dtype)

    def _changed(self, unit_index: int, cls: str, expected: int) -> InputError:
        return InputError(
            f"unit {unit_index} has more records of class {cls!r} than the counting pass saw ({expected}):"
            " the input or the transform changed between the passes. Make the transform deterministic"
            " and re-run the job."
        )

    def _cursor(self, unit_index: int, start: int) -> _Cursor:
        if start == 0:
            self._cursors[unit_index] = _Cursor()
        cursor = self._cursors.get(unit_index)
        if cursor is None or cursor.next_start != start:
            expected = 0 if cursor is None else cursor.next_start
            raise ValueError(
                f"stratified exact assignment of unit {unit_index} must proceed in order: got start={start},"
                f" expected {expected}. Assign each unit's batches sequentially from start=0."
            )
        return cursor

    def _check_range(self, unit_index: int, start: int, n: int) -> None:
        if not 0 <= unit_index < len(self._unit_sizes):
            raise IndexError(
                f"unit {unit_index} out of range: the counting pass saw {len(self._unit_sizes)} units"
            )
        size = int(self._unit_sizes[unit_index])
        if start < 0 or n < 0 or start + n > size:
            raise InputError(
                f"unit {unit_index} has {size} records in the counting pass, but records"
                f" [{start}, {start + n}) were assigned: the input or the transform changed between the"
                " passes. Make the transform deterministic and re-run the job."
            )


def _unit_total(counts: int | Mapping[str, int], index: int, stratified: bool) -> int:
    if isinstance(counts, Mapping):
        bad = {c: k for c, k in counts.items() if not isinstance(c, str) or not isinstance(k, int) or k < 0}
        if bad:
            raise ValueError(f"unit {index}: per-class counts must map str -> int >= 0, got {bad}")
        return sum(counts.values())
    if stratified:
        raise ValueError(
            f"unit {index}: stratified=True needs per-class counts ({{class: count}}) for every unit, got"
            f" {counts!r}; collect class_labels(...) counts in the counting pass"
        )
    if isinstance(counts, bool) or not isinstance(counts, (int, np.integer)) or counts < 0:
        raise ValueError(f"unit {index}: record count must be an int >= 0, got {counts!r}")
    return int(counts)
