"""Connected components of the verified-pair graph, and the keep rule.

Keep rule: the representative of a component is its member with the smallest id, and only the
representative is kept. Ids are supplied by the caller and must order records by input order
(e.g. ``(file index, line)`` tuples, or one int64 packing them), so the output is the same for any
``-j``, any split into shards and any order of the edges: components and their minima are
properties of the graph alone.

Two implementations with the same result (a ``{node: representative}`` dict over the nodes of the
edges; a record in no edge is its own representative):

* :func:`union_find`: single-process reference (path halving, union by smaller root).
* min-label propagation with root hooking and pointer jumping, written as steps that each run on
  one shard and combine with an associative, commutative ``min``, so that a distributed engine can
  run every step as one keyed exchange. One round is:

  1. join the current labels of both endpoints onto each edge (exchange by node);
  2. :func:`propagate` on every edge shard: proposals ``node -> smaller label`` (for both endpoints
     and for their current labels: hooking the roots is what makes long chains collapse in a few
     rounds instead of one round per hop);
  3. exchange proposals by node and :func:`apply_proposals` them with ``min``;
  4. :func:`shortcut` (pointer jumping ``L[x] = L[L[x]]``, an exchange by label);
  5. all-reduce the number of changed labels; stop when it is 0.

  Labels only decrease and always name a node of the same component, so the loop ends; at the
  fixpoint both ends of every edge share a label, which is then the component's smallest id.
  :func:`label_components` is that loop in one process (``shards`` simulates ranks).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = [
    "apply_proposals",
    "cluster_sizes",
    "keep_mask",
    "label_components",
    "propagate",
    "representatives",
    "shortcut",
    "union_find",
]


class Id(Protocol):
    """A record id: hashable and totally ordered by input order (int, tuple of ints, ...)."""

    def __lt__(self, other: Any, /) -> bool: ...

    def __hash__(self) -> int: ...


T = TypeVar("T", bound=Id)


def union_find(edges: Iterable[tuple[T, T]]) -> dict[T, T]:
    """``{node: smallest node of its component}`` for every node of ``edges`` (the reference)."""
    parent: dict[T, T] = {}

    def find(x: T) -> T:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            lo, hi = (ru, rv) if ru < rv else (rv, ru)
            parent[hi] = lo
    return {x: find(x) for x in list(parent)}


def propagate(edges: Iterable[tuple[T, T]], labels: Mapping[T, T]) -> dict[T, T]:
    """One propagation round over one shard of edges: ``{node: proposed smaller label}``.

    ``labels`` needs the labels of the endpoints of these edges (missing: the node itself).
    Proposals of several shards combine with :func:`apply_proposals` (or a min-merge) in any order.
    """
    out: dict[T, T] = {}
    for u, v in edges:
        lu, lv = labels.get(u, u), labels.get(v, v)
        m = lu if lu < lv else lv
        for x, lx in ((u, lu), (v, lv), (lu, lu), (lv, lv)):
            if m < lx and (x not in out or m < out[x]):
                out[x] = m
    return out


def apply_proposals(labels: Mapping[T, T], *proposals: Mapping[T, T]) -> tuple[dict[T, T], int]:
    """Lower each label to the smallest proposal for it; returns the new labels and #changes."""
    new = dict(labels)
    changed = 0
    for props in proposals:
        for x, m in props.items():
            if m < new.get(x, x):
                new[x] = m
                changed += 1
    return new, changed


def shortcut(labels: Mapping[T, T]) -> tuple[dict[T, T], int]:
    """One pointer-jumping step ``L[x] = L[L[x]]``; returns the new labels and #changes."""
    new = {x: labels.get(lx, lx) for x, lx in labels.items()}
    return new, sum(1 for x, lx in new.items() if lx != labels[x])


def label_components(
    edge_shards: Sequence[Iterable[tuple[T, T]]], max_rounds: int = 10_000
) -> tuple[dict[T, T], int]:
    """Min-label propagation to its fixpoint over edges split into shards; ``(labels, rounds)``.

    The result equals :func:`union_find` of all the edges, whatever the sharding.

    Raises:
        RuntimeError: no fixpoint after ``max_rounds`` rounds (impossible for a finite graph, as
            labels only decrease; a guard against ids whose ordering is inconsistent).
    """
    shards = [list(s) for s in edge_shards]
    labels: dict[T, T] = {x: x for s in shards for e in s for x in e}
    for rounds in range(1, max_rounds + 1):
        labels, changed = apply_proposals(labels, *(propagate(s, labels) for s in shards))
        labels, jumped = shortcut(labels)
        if not changed and not jumped:
            return labels, rounds
    raise RuntimeError(
        f"connected components did not converge in {max_rounds} rounds: the ids are not totally"
        " ordered (use ints or tuples of ints in input order)"
    )


def representatives(ids: Iterable[T], labels: Mapping[T, T]) -> list[T]:
    """The representative (kept record's id) of each id; an id in no edge represents itself."""
    return [labels.get(i, i) for i in ids]


def keep_mask(ids: Iterable[T], labels: Mapping[T, T]) -> np.ndarray:
    """The keep rule: ``True`` for the records that represent their component."""
    return np.array([labels.get(i, i) == i for i in ids], dtype=bool)


def cluster_sizes(labels: Mapping[T, T]) -> Counter[T]:
    """``{representative: number of members}`` of the components with at least one edge."""
    return Counter(labels.values())
