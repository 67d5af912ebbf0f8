"""The typed-CSV corpus and its pandas reference for ``bench_stats.py --typed-csv``.

The corpus mixes the columns a user's first CSV has: ints (one with ``NA`` cells), floats (one
with ``NA`` cells), a small-cardinality year, a bool, an ISO date, a low-cardinality category
and a near-unique text column, split over ``k`` files so ranks can share the work.
The reference (``pandas-csv``) is ``pandas.read_csv`` per file (defaults) + ``concat``, then
``describe()``, ``quantile([...])``, ``nunique()`` and ``value_counts().head(20)`` of the
string columns: about what ``stats`` reports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

CSV_COLUMNS = ("id", "x", "y", "n", "year", "flag", "day", "cat", "text")
NUMERIC = ("id", "x", "y", "n", "year")
QUANTILES = [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]


def csv_files(path: Path) -> list[str]:
    files = sorted(str(p) for p in Path(path).glob("*.csv"))
    if not files:
        raise FileNotFoundError(f"no *.csv files in {path}")
    return files


def ensure_typed_csv(rows: int, k: int, seed: int, cache_root: Path) -> Path:
    """``k`` CSV files with ``rows`` rows in all under ``cache_root`` (cached; ``_DONE`` last)."""
    import pandas as pd

    out = cache_root / f"typed-csv-n{rows}-k{k}-s{seed}"
    marker = out / "_DONE"
    if marker.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    cats = np.array([f"cat-{i:02d}" for i in range(20)])
    start = 0
    for part in range(k):
        n = rows // k + (1 if part < rows % k else 0)
        x = rng.lognormal(0, 1, n)
        n_col = rng.poisson(20, n).astype("float64")
        df = pd.DataFrame(
            {
                "id": np.arange(start, start + n),
                "x": np.where(rng.random(n) < 0.05, np.nan, x),
                "y": rng.normal(0, 3, n).round(6),
                "n": pd.array(np.where(rng.random(n) < 0.1, np.nan, n_col), dtype="Int64"),
                "year": 1990 + rng.integers(0, 30, n),
                "flag": rng.random(n) < 0.3,
                "day": (np.datetime64("2020-01-01") + rng.integers(0, 1500, n)).astype("datetime64[D]"),
                "cat": cats[rng.zipf(1.6, n) % 20],
                "text": [
                    f"row {i} text {j}" for i, j in zip(range(start, start + n), rng.integers(0, 1 << 30, n))
                ],
            }
        )
        df.to_csv(out / f"part-{part:03d}.csv", index=False, na_rep="NA")
        start += n
    size = sum(p.stat().st_size for p in out.glob("*.csv"))
    print(
        f"# generated a typed CSV: {rows} rows in {k} files ({size / 1e6:.1f} MB)"
        f" in {time.perf_counter() - t0:.1f}s"
    )
    marker.write_text(json.dumps({"rows": rows, "k": k, "seed": seed, "bytes": size}))
    return out


def pandas_profile(df: Any) -> dict[str, Any]:
    """What the pandas reference computes (shared by the JSONL and the typed-CSV runs)."""
    num = df.select_dtypes("number")
    desc = df.describe()
    quant = num.quantile(QUANTILES)
    nunique = df.nunique()
    tops = {c: df[c].value_counts().head(20) for c in df.select_dtypes("object").columns}
    return {
        "records_in": len(df),
        "described": list(desc.columns),
        "quantiles": list(quant.columns),
        "nunique": {k: int(v) for k, v in nunique.items()},
        "top1": {c: int(t.iloc[0]) for c, t in tops.items() if len(t)},
    }


def ref_pandas_csv(files: list[str]) -> dict[str, Any]:
    import pandas as pd

    df = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    num = df.select_dtypes("number")
    return {
        **pandas_profile(df),
        "moments": {c: [float(num[c].mean()), float(num[c].std()), int(num[c].isna().sum())] for c in num},
    }


def typed_note(doc: dict[str, Any]) -> str:
    """Whether ``stats`` saw the numeric CSV columns as numbers (the typed CSV reader) or strings."""
    fields = doc.get("fields", {})
    typed = [c for c in NUMERIC if "string" not in fields.get(c, {}).get("types", {"string": 1})]
    return "typed" if len(typed) == len(NUMERIC) else f"untyped ({len(typed)}/{len(NUMERIC)} numeric)"
