"""Example user transforms: plain functions from one record dict to one record dict.

Pass any of them to the ``transform`` component as ``--fn examples/transforms.py:NAME``.
They are pure Python with no I/O, so they cost the same wherever they run:

- ``light``: the benchmark's cheap transform (about 1 us per record).
- ``heavy``: ``light`` plus a 6-round rolling hash over the text (about 70 us per record),
  a stand-in for CPU-bound pure-Python work that holds the GIL.
- ``clean``: text normalisation that also *drops* records (returns ``None`` for empty text).
- ``tokenize``: ``clean`` plus a ``tokens`` list; one record in, at most one out (not a
  flat-map), so the output keeps one line per input record.

Returning ``None`` means "drop this record"; the runner counts it in ``records_in`` but not
in ``records_out``. Transforms may mutate and return their argument.
"""

from __future__ import annotations

import math
from typing import Any, Optional

__all__ = ["HASH_ROUNDS", "clean", "heavy", "light", "tokenize"]

Record = dict[str, Any]

HASH_ROUNDS = 6  # matches /work/shared/bench/transforms.py: ~70 us/record on the reference data
_MASK = (1 << 61) - 1


def light(rec: Record) -> Record:
    """Lower-case and strip ``text``; add ``n_tokens`` and ``log1p_x``. About 1 us per record."""
    text = rec["text"].lower().strip()
    rec["text"] = text
    rec["n_tokens"] = len(text.split())
    rec["log1p_x"] = math.log1p(rec["x"])
    return rec


def heavy(rec: Record) -> Record:
    """``light`` plus a CPU-bound rolling hash ``h`` over the text, ``HASH_ROUNDS`` times."""
    rec = light(rec)
    h = 0
    for r in range(HASH_ROUNDS):
        h = r
        for c in rec["text"]:
            h = (h * 31 + ord(c)) & _MASK
    rec["h"] = h
    return rec


def clean(rec: Record) -> Optional[Record]:
    """Normalise ``text`` (lower-case, strip, collapse runs of whitespace to one space).

    Adds ``n_tokens`` (whitespace tokens) and ``log1p_x`` (``log1p(x)``, or ``None`` when ``x``
    is missing or null). Returns ``None``, dropping the record, when the text is empty.
    """
    tokens = str(rec.get("text") or "").lower().split()
    if not tokens:
        return None
    rec["text"] = " ".join(tokens)
    rec["n_tokens"] = len(tokens)
    x = rec.get("x")
    rec["log1p_x"] = math.log1p(x) if x is not None else None
    return rec


def tokenize(rec: Record) -> Optional[Record]:
    """``clean`` plus ``tokens``: the list of whitespace tokens of the cleaned text.

    One record in, at most one out: this adds a list field rather than flat-mapping to one
    record per token. Returns ``None`` for records that ``clean`` drops.
    """
    out = clean(rec)
    if out is not None:
        out["tokens"] = out["text"].split(" ")
    return out
