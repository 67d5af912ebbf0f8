"""Column names of tabular inputs: duplicates renamed like pandas, headerless files named 0..n-1.

A CSV header ``x,y,x`` (or a Parquet file with two columns ``x``) would lose a column when
records become dicts. The names are made unique the way ``pandas.read_csv`` does (its C parser):
the second ``x`` becomes ``x.1``, the third ``x.2``, skipping any suffix the header already holds.
The renames are kept per file (planning), reported on stderr and in the manifest
(``renamed_columns``).
"""

import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from torchx_datapipes.io import manifest_schema as ms

Renames = List[Tuple[int, str, str]]  # (column index, name in the file, name given)


def dedup(names: Sequence[str]) -> List[str]:
    """Unique names, renamed like pandas: ``x, y, x`` -> ``x, y, x.1``; ``x, x, x.1`` -> ``x, x.2, x.1``."""
    out = list(names)
    taken = set(out)
    counts: Dict[str, int] = {}
    for i, col in enumerate(out):
        old = col
        cur = counts.get(col, 0)
        while cur > 0:
            counts[old] = cur + 1
            col = f"{old}.{cur}"
            cur = cur + 1 if col in taken else counts.get(col, 0)
        out[i] = col
        counts[col] = cur + 1
    return out


def renames(raw: Sequence[str], given: Sequence[str]) -> Renames:
    return [(i, r, g) for i, (r, g) in enumerate(zip(raw, given, strict=True)) if r != g]


def headerless(n: int, schema: Optional[Sequence[str]] = None) -> List[str]:
    """The names of a file without a header: the ``--schema`` columns when it lists all ``n`` in
    order, else ``"0"`` .. ``"n-1"``."""
    if schema is not None and len(schema) == n:
        return list(schema)
    return [str(i) for i in range(n)]


def describe(path: str, done: Renames) -> str:
    pairs = ", ".join(f"column {i + 1} {r!r} -> {g!r}" for i, r, g in done)
    return (
        f"{path}: duplicate column names renamed: {pairs} (like pandas; use the new names in your function)"
    )


def warn(path: str, done: Renames) -> None:
    if done:
        print(f"warning: {describe(path, done)}", file=sys.stderr, flush=True)


def manifest_entries(reads: Sequence[Tuple[str, Optional[Dict[str, Any]]]]) -> Dict[str, Any]:
    """``{"renamed_columns": {path: [{"column": i, "from": name, "to": new}, ...]}}`` for the planned
    units ``(path, Unit.read)`` whose file had duplicate column names, or ``{}`` when none had."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for path, read in reads:
        for i, old, new in (read or {}).get("renamed", []):
            entries = out.setdefault(path, [])
            entry = {ms.RENAMED_COLUMN: int(i) + 1, ms.RENAMED_FROM: old, ms.RENAMED_TO: new}
            if entry not in entries:
                entries.append(entry)
    return {ms.RENAMED_COLUMNS: out} if out else {}
