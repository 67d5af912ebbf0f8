"""Reproducible k-way train/val/test splits: a pure library that the ``split`` runner calls.

Two methods, both independent of world size, worker count, input order and file boundaries:

* ``hash`` (default): a record's split is a pure function of its key's canonical bytes, the seed
  and the fractions (:func:`hash_keys` + :func:`assign_hash`). Records sharing a key (or, with no
  key, exact duplicates) always share a split, and appending data never moves an existing record.
  With ``--stratify`` the counting pass fixes per-class thresholds (:class:`StratifiedHashAssigner`).
* ``exact``: exact largest-remainder counts per split (and per class), chosen by a seeded
  permutation of the global record index (:class:`ExactAssigner`).

Non-goals: no I/O here (the runner reads units and writes ``out/<split>/part-*.jsonl``), and no
group-aware exact counts. See ``docs/split.md`` for the guarantees.
"""

from torchx_datapipes.split.exact import ExactAssigner
from torchx_datapipes.split.fractions import Fractions, largest_remainder, parse_fractions
from torchx_datapipes.split.hashing import (
    KeySpec,
    MissingKeyError,
    assign_hash,
    canonical,
    hash_keys,
    parse_key,
)
from torchx_datapipes.split.stratified import StratifiedHashAssigner, class_labels

__all__ = [
    "ExactAssigner",
    "Fractions",
    "KeySpec",
    "MissingKeyError",
    "StratifiedHashAssigner",
    "assign_hash",
    "canonical",
    "class_labels",
    "hash_keys",
    "largest_remainder",
    "parse_fractions",
    "parse_key",
]
