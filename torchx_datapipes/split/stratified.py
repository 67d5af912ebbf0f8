"""Stratified splits: class labels, per-class thresholds for ``method=hash``, shared reporting.

``method=hash`` + ``--stratify FIELD``: the counting pass collects every record's
``(class, hash)``; :meth:`StratifiedHashAssigner.from_hashes` sorts each class's hashes and puts
per-class thresholds between the records at the largest-remainder cut points. A record's split
then depends only on its hash and its class's thresholds, so it is independent of world size,
workers, input order and file boundaries, and per-class counts are exact (unless records with
the *same* key hash straddle a cut: they stay together, in the later split). Appending data
recomputes the thresholds; only records whose hash lies between an old and a new threshold move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from torchx_datapipes.split.fractions import UNIT_BITS, Fractions, largest_remainder, parse_fractions
from torchx_datapipes.split.hashing import MissingKeyError, canonical, to_unit

__all__ = ["StratifiedHashAssigner", "class_labels"]

_MAX_LISTED = 20


def class_labels(records: Sequence[Any], field: str) -> list[str]:
    """Each record's class: the canonical JSON text of ``record[field]`` (so ``1`` and ``"1"`` differ).

    Raises:
        MissingKeyError: a record lacks ``field`` or is not a dict.
    """
    try:
        return [canonical(r[field]).decode() for r in records]
    except (KeyError, TypeError, IndexError):
        for i, r in enumerate(records):
            if not isinstance(r, Mapping) or field not in r:
                raise MissingKeyError(i, field, r) from None
        raise


class StratifiedHashAssigner:
    """Per-class hash thresholds giving exact per-class counts (``method=hash`` + ``--stratify``).

    State is plain data: ``to_dict()`` is JSON (thresholds are < 2**53, exact even in JavaScript),
    so the lead can compute it once and ship it to every worker with ``from_dict()``.
    """

    def __init__(
        self,
        fractions: Fractions,
        thresholds: Mapping[str, Sequence[int]],
        counts: Mapping[str, Sequence[int]],
    ) -> None:
        self.fractions = fractions
        k = len(fractions)
        self._thresholds = {c: np.asarray(t, dtype=np.uint64).reshape(k - 1) for c, t in thresholds.items()}
        self._class_counts = {c: tuple(int(x) for x in counts[c]) for c in sorted(thresholds)}
        # one row per class plus a last row, the plain fraction boundaries, for unseen classes
        self._rows = {c: i for i, c in enumerate(self._thresholds)}
        self._table = np.stack([*self._thresholds.values(), fractions.boundaries]).reshape(-1, k - 1)

    @classmethod
    def from_hashes(
        cls, per_class_hashes: Mapping[str, np.ndarray], fractions: Fractions
    ) -> StratifiedHashAssigner:
        """Thresholds from every record's hash, grouped by class (record order does not matter)."""
        thresholds: dict[str, list[int]] = {}
        counts: dict[str, tuple[int, ...]] = {}
        for c in sorted(per_class_hashes):
            units = np.sort(to_unit(np.asarray(per_class_hashes[c], dtype=np.uint64)))
            counts[c] = largest_remainder(len(units), fractions)
            thresholds[c] = [_cut(units, int(cut)) for cut in np.cumsum(counts[c][:-1])]
        return cls(fractions, thresholds, counts)

    def assign(self, hashes: np.ndarray, classes: Sequence[str]) -> np.ndarray:
        """Split id of each record from its hash and class.

        A class the counting pass never saw falls back to the plain fraction boundaries of
        ``assign_hash``, so new data is still assigned deterministically.
        """
        units = to_unit(hashes)
        if len(classes) != len(units):
            raise ValueError(f"need one class per hash: got {len(units)} hashes and {len(classes)} classes")
        rows, unseen = self._rows, len(self._rows)
        codes = np.fromiter((rows.get(c, unseen) for c in classes), dtype=np.intp, count=len(units))
        split = (units[:, None] >= self._table[codes]).sum(axis=1)
        return split.astype(self.fractions.split_dtype)

    def split_counts(self) -> dict[str, Any]:
        """``{"total": N, "splits": {name: count}, "classes": {class: {name: count}}}`` as counted."""
        totals = (
            np.sum(list(self._class_counts.values()), axis=0)
            if self._class_counts
            else [0] * len(self.fractions)
        )
        total = sum(sum(c) for c in self._class_counts.values())
        return class_counts_table(
            self.fractions, total, tuple(int(x) for x in totals), self._class_counts, True
        )

    def warnings(self) -> list[str]:
        totals = self.split_counts()["splits"].values()
        return small_class_warnings(self.fractions, sum(totals), tuple(totals), self._class_counts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fractions": str(self.fractions),
            "thresholds": {c: [int(x) for x in t] for c, t in self._thresholds.items()},
            "counts": {c: list(n) for c, n in self._class_counts.items()},
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> StratifiedHashAssigner:
        return cls(parse_fractions(state["fractions"]), state["thresholds"], state["counts"])


def _cut(sorted_units: np.ndarray, cut: int) -> int:
    """A threshold with exactly ``cut`` of the sorted 53-bit values below it, midway between neighbours.

    Midway (rather than at a record) keeps the threshold stable when records near it come and go.
    Equal values cannot be separated: they all land at or above the threshold.
    """
    if cut <= 0:
        return 0
    if cut >= len(sorted_units):
        return 1 << UNIT_BITS
    lo, hi = int(sorted_units[cut - 1]), int(sorted_units[cut])
    return lo + (hi - lo + 1) // 2


def class_counts_table(
    fractions: Fractions,
    total: int,
    counts: tuple[int, ...],
    class_counts: Mapping[str, tuple[int, ...]],
    stratified: bool,
) -> dict[str, Any]:
    out: dict[str, Any] = {"total": total, "splits": dict(zip(fractions.names, counts, strict=False))}
    if stratified:
        out["classes"] = {c: dict(zip(fractions.names, n, strict=False)) for c, n in class_counts.items()}
    return out


def small_class_warnings(
    fractions: Fractions, total: int, counts: tuple[int, ...], class_counts: Mapping[str, tuple[int, ...]]
) -> list[str]:
    """One message per split left empty overall, and one summary of classes missing from some split."""
    out = [
        f"split {name!r} gets no records: only {total} records at {fractions}"
        for name, n in zip(fractions.names, counts, strict=False)
        if n == 0
    ]
    small = [(c, n) for c, n in class_counts.items() if 0 in n]
    if small:
        listed = "; ".join(
            f"{c} ({sum(n)} records; none in {_empty(fractions, n)})" for c, n in small[:_MAX_LISTED]
        )
        more = f"; ... and {len(small) - _MAX_LISTED} more" if len(small) > _MAX_LISTED else ""
        out.append(
            f"{len(small)} of {len(class_counts)} classes are too small to appear in every split at"
            f" {fractions}: {listed}{more}. Their counts are kept in split_counts()['classes'];"
            " merge rare classes or use fewer splits if every split needs every class."
        )
    return out


def _empty(fractions: Fractions, counts: tuple[int, ...]) -> str:
    return ", ".join(name for name, k in zip(fractions.names, counts, strict=True) if k == 0)
