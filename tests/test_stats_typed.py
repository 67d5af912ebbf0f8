"""``stats`` and ``split`` on typed data (issue 10, section 4), in-process on real files.

Typed records come from Parquet written by pyarrow (ints of several widths, floats with nulls
and NaN, bools, dates, timestamps, binary, list<float32>, strings), from a typed CSV, and from a
``--fn`` that returns datetimes, bytes, numpy arrays (non-contiguous too), torch tensors and
nested lists.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.stats import SCHEMA_VERSION, StatsConfig, StatsPartial

N = 3000
REL = 1e-9


def typed_table(n: int = N, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    i64 = rng.integers(-1000, 1000, n)
    f64 = rng.lognormal(0, 1, n)
    f64[rng.random(n) < 0.05] = np.nan  # a real NaN: missing, like pandas
    t0 = dt.datetime(2020, 1, 1)
    return pa.table(
        {
            "i64": pa.array([None if k % 11 == 0 else int(v) for k, v in enumerate(i64)], pa.int64()),
            "f64": pa.array([None if k % 13 == 0 else float(v) for k, v in enumerate(f64)], pa.float64()),
            "i32": pa.array(rng.integers(0, 1 << 20, n).astype(np.int32)),
            "f32": pa.array(rng.normal(5, 2, n).astype(np.float32)),
            "year": pa.array([None if k % 17 == 0 else 2000 + k % 12 for k in range(n)], pa.int16()),
            "flag": pa.array([k % 3 == 0 for k in range(n)]),
            "day": pa.array(
                [dt.date(2021, 1, 1) + dt.timedelta(days=k % 400) for k in range(n)], pa.date32()
            ),
            "ts": pa.array([t0 + dt.timedelta(minutes=37 * k) for k in range(n)], pa.timestamp("us")),
            "blob": pa.array([bytes(k % 50) for k in range(n)], pa.binary()),
            "vec": pa.array([[float(k), float(k) / 2, -1.0] for k in range(n)], pa.list_(pa.float32())),
            "tag": pa.array([None if k % 7 == 0 else f"t{k % 9}" for k in range(n)]),
        }
    )


def write_parquet(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=700)  # several row groups: several units
    return path


def stats_doc(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "stats.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 2
    return doc


def rel_close(got: float | None, want: float) -> bool:
    return got is not None and abs(got - want) <= REL * max(abs(want), 1e-300)


def assert_matches_pandas(doc: dict[str, Any], df: pd.DataFrame) -> list[str]:
    """mean/std/min/max/missing of every numeric pandas column, to 1e-9; returns the columns."""
    numeric = [c for c in df.select_dtypes("number").columns]
    assert numeric
    for c in numeric:
        col = df[c].astype("float64")  # pandas sums float32 in float32; we profile in float64
        f = doc["fields"][c]
        num = f["numeric"]
        assert f["missing"] == int(col.isna().sum()), c
        assert f["count"] == int(col.count()), c
        assert rel_close(num["mean"], float(col.mean())), (c, num["mean"], col.mean())
        assert rel_close(num["std_sample"], float(col.std())), (c, num["std_sample"], col.std())
        assert num["min"] == float(col.min()) and num["max"] == float(col.max()), c
    return numeric


def test_stats_parquet_matches_pandas(tmp_path: Path) -> None:
    table = typed_table()
    path = write_parquet(tmp_path / "in/typed.parquet", table)
    run_op("stats", str(path), tmp_path / "out")
    doc = stats_doc(tmp_path / "out")
    df = pd.read_parquet(path)
    cols = assert_matches_pandas(doc, df)
    assert set(cols) == {"i64", "f64", "i32", "f32", "year"}
    f = doc["fields"]
    assert f["f64"]["nan"] > 0 and f["f64"]["null"] > 0  # both count as missing
    assert f["f64"]["missing"] == f["f64"]["nan"] + f["f64"]["null"]
    assert f["i64"]["types"] == {"int": int(df["i64"].count()), "null": int(df["i64"].isna().sum())}
    assert f["flag"]["numeric"] is None and f["flag"]["bool"] == {"true": 1000, "false": 2000}
    assert f["tag"]["missing"] == int(df["tag"].isna().sum())
    # dates and timestamps: exact min/max as ISO 8601, like pandas
    assert f["day"]["types"] == {"date": N} and f["day"]["date"]["min"] == str(df["day"].min())
    assert f["day"]["date"]["max"] == str(df["day"].max())
    ts = f["ts"]["datetime"]
    assert ts["min"] == df["ts"].min().isoformat() and ts["max"] == df["ts"].max().isoformat()
    assert sum(ts["histogram"]["counts"]) == N and len(ts["histogram"]["edges"]) <= 61  # calendar bins
    assert ts["histogram"]["edges"][0] <= ts["min"] <= ts["histogram"]["edges"][1]
    assert ts["histogram"]["unit"] and ts["timezone"] == {"aware": 0, "naive": N}
    # bytes: exact length statistics
    lengths = np.array([k % 50 for k in range(N)], dtype=np.float64)
    blob = f["blob"]["bytes"]["length"]
    assert f["blob"]["types"] == {"bytes": N} and blob["min"] == 0 and blob["max"] == 49
    assert rel_close(blob["mean"], float(lengths.mean()))
    # list<float32>: shape distribution and element statistics
    vec = f["vec"]["list"]
    assert vec["shapes"] == [{"shape": [3], "count": N}] and vec["ndim"] == {"1": N}
    elements = np.array([[k, k / 2, -1.0] for k in range(N)], dtype=np.float32).astype(np.float64)
    assert rel_close(vec["elements"]["numeric"]["mean"], float(elements.mean()))


def test_stats_typed_csv_matches_pandas(tmp_path: Path) -> None:
    """The same check on a CSV with ``NA`` cells against ``pandas.read_csv`` defaults."""
    df0 = typed_table().to_pandas()[["i64", "f64", "i32", "f32", "year", "tag"]]
    path = tmp_path / "in/typed.csv"
    path.parent.mkdir(parents=True)
    df0.to_csv(path, index=False, na_rep="NA")
    run_op("stats", str(path), tmp_path / "out")
    doc = stats_doc(tmp_path / "out")
    assert "string" not in doc["fields"]["i32"]["types"], doc["fields"]["i32"]["types"]
    assert_matches_pandas(doc, pd.read_csv(path))


def test_small_cardinality_integers_get_one_bar_per_value(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "in/typed.parquet", typed_table())
    run_op("stats", str(path), tmp_path / "out")
    doc = stats_doc(tmp_path / "out")
    year = doc["fields"]["year"]["numeric"]
    want = {2000 + v: sum(1 for k in range(N) if k % 17 and k % 12 == v) for v in range(12)}
    assert year["value_counts"] == [{"value": y, "count": c} for y, c in sorted(want.items())]
    assert doc["fields"]["i64"]["numeric"]["value_counts"] is None  # ~2000 distinct values
    assert doc["fields"]["f32"]["numeric"]["value_counts"] is None  # not integers
    page = (tmp_path / "out/report.html").read_text()
    assert 'id="bars-year"' in page and 'id="hist-year"' not in page and 'id="hist-i64"' in page
    assert 'id="time-ts"' in page and 'id="hist-blob (bytes length)"' in page
    assert 'id="hist-vec[]"' in page and 'src="http' not in page  # self-contained
    md = (tmp_path / "out/stats.md").read_text()
    assert "| ts | datetime |" in md and "2020-01-01T00:00:00" in md


def test_value_counts_merge_is_partition_independent() -> None:
    cfg = StatsConfig(discrete_limit=5)
    recs = [{"a": k % 6 if k < 60 else k % 5, "b": k % 4} for k in range(120)]
    whole = StatsPartial(cfg)
    whole.update(recs)
    left, right = StatsPartial(cfg), StatsPartial(cfg)
    left.update(recs[60:])  # 5 distinct values each side, 6 in all: over the limit
    right.update(recs[:60])
    merged = StatsPartial.from_bytes(left.to_bytes())
    merged.merge(StatsPartial.from_bytes(right.to_bytes()))
    for doc in (whole.result(), merged.result()):
        assert doc["fields"]["a"]["numeric"]["value_counts"] is None
        assert doc["fields"]["b"]["numeric"]["value_counts"] == [{"value": v, "count": 30} for v in range(4)]


def _tensors(rec: dict[str, Any]) -> dict[str, Any]:
    k = int(rec["id"])
    base = np.arange(24, dtype=np.int8).reshape(2, 3, 4) + k % 5
    return {
        "np": base[:, ::2, 1:],  # non-contiguous int8 view, shape (2, 2, 3)
        "t": torch.full((3, 4), float(k), dtype=torch.float32).t(),  # non-contiguous (4, 3)
        "bf": torch.ones(2, dtype=torch.bfloat16) * (k % 3),
        "var": np.zeros((k % 3 + 1,), dtype=np.float64),  # variable shape
        "when": dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=k),
        "raw": bytes(k % 7),
        "scalar": np.float32(k),
    }


def test_stats_of_tensors_from_fn(tmp_path: Path) -> None:
    n = 500
    write_jsonl(tmp_path / "in/a.jsonl", [{"id": k} for k in range(n)])
    run_op("stats", str(tmp_path / "in/a.jsonl"), tmp_path / "out", fn=_tensors)
    f = stats_doc(tmp_path / "out")["fields"]
    t = f["np"]["tensor"]
    assert f["np"]["types"] == {"tensor": n} and t["dtypes"] == {"int8": n} and t["libraries"] == {"numpy": n}
    assert t["shapes"] == [{"shape": [2, 2, 3], "count": n}] and t["ndim"] == {"3": n}
    want = np.stack([_tensors({"id": k})["np"] for k in range(n)]).astype(np.float64)
    el = t["elements"]
    assert el["count"] == want.size and rel_close(el["mean"], float(want.mean()))
    assert el["min"] == want.min() and el["max"] == want.max()
    assert rel_close(el["std_sample"], float(want.std(ddof=1)))
    tt = f["t"]["tensor"]
    assert tt["dtypes"] == {"float32": n} and tt["libraries"] == {"torch": n}
    assert tt["shapes"] == [{"shape": [4, 3], "count": n}] and rel_close(tt["elements"]["mean"], (n - 1) / 2)
    bf = f["bf"]["tensor"]
    assert bf["dtypes"] == {"bfloat16": n} and bf["elements"]["value_counts"] is not None
    var = f["var"]["tensor"]
    assert {tuple(s["shape"]): s["count"] for s in var["shapes"]} == {(1,): 167, (2,): 167, (3,): 166}
    assert var["distinct_shapes"] == 3 and var["numel"]["mean"] == pytest.approx(2.0 - 1 / n, rel=1e-12)
    when = f["when"]["datetime"]
    assert when["min"] == "2024-05-01T00:00:00" and when["timezone"] == {"aware": n, "naive": 0}
    assert when["max"] == (dt.datetime(2024, 5, 1) + dt.timedelta(hours=n - 1)).isoformat()
    assert f["raw"]["bytes"]["length"]["max"] == 6
    assert f["scalar"]["types"] == {"float": n} and f["scalar"]["numeric"]["max"] == n - 1
    page = (tmp_path / "out/report.html").read_text()
    assert 'id="hist-t (tensor elements)"' in page and "float32 4×3" in page


def test_nan_is_missing_everywhere() -> None:
    p = StatsPartial(StatsConfig())
    p.update([{"x": math.nan}, {"x": None}, {}, {"x": 1.5}, {"x": [math.nan, 2.0]}])
    x = p.result()["fields"]["x"]
    assert (x["count"], x["missing"], x["null"], x["nan"]) == (2, 3, 1, 1)
    assert x["numeric"]["nan"] == 1 and x["numeric"]["finite"] == 1
    el = x["list"]["elements"]
    assert (el["count"], el["missing"], el["nan"]) == (1, 1, 1)


def test_split_keeps_types(tmp_path: Path) -> None:
    table = typed_table(n=400)
    path = write_parquet(tmp_path / "in/typed.parquet", table)
    out = tmp_path / "split"
    run_op("split", str(path), out, "--fractions", "train=0.7,val=0.3", "--output_format", "parquet")
    got: list[dict[str, Any]] = []
    for name in ("train", "val"):
        for part in sorted((out / name).glob("part-*.parquet")):
            got += pq.read_table(part).to_pylist()
    want = table.to_pylist()
    key = lambda r: r["ts"]  # noqa: E731 - unique per row
    assert len(got) == len(want)
    for g, w in zip(sorted(got, key=key), sorted(want, key=key), strict=True):
        assert g.keys() == w.keys()
        for c in w:
            same = g[c] == w[c] or (isinstance(w[c], float) and math.isnan(w[c]) and math.isnan(g[c]))
            assert same and type(g[c]) is type(w[c]), (c, g[c], w[c])


def test_split_jsonl_keeps_numbers(tmp_path: Path) -> None:
    table = typed_table(n=300).select(["i64", "f64", "i32", "year", "flag", "tag"])
    path = write_parquet(tmp_path / "in/typed.parquet", table)
    nans = sum(1 for v in table.column("f64").to_pylist() if v is not None and math.isnan(v))
    assert nans > 0
    out = tmp_path / "split"
    m = run_op("split", str(path), out, "--fractions", "train=0.5,val=0.5", "--on_error", "skip")
    got = [
        json.loads(line)
        for split in ("train", "val")
        for p in sorted((out / split).glob("part-*.jsonl"))
        for line in p.read_text().splitlines()
    ]
    # JSON has no NaN: a record holding one is a bad record naming the field, never a silent null
    assert len(got) == 300 - nans and m["bad"] == nans
    errors = [json.loads(x) for p in (out / "_errors").glob("*") for x in p.read_text().splitlines()]
    assert len(errors) == nans and all("field f64: NaN/inf" in e["error"] for e in errors)
    assert all("'f64': nan" in e["raw"] for e in errors)  # the record as it was, not with a null
    for r in got:
        assert r["i64"] is None or type(r["i64"]) is int
        assert r["f64"] is None or (type(r["f64"]) is float and math.isfinite(r["f64"]))
        assert type(r["flag"]) is bool and type(r["i32"]) is int


def test_split_hashes_typed_values_without_moving_json_ones() -> None:
    from decimal import Decimal

    from torchx_datapipes.split.hashing import canonical

    assert canonical({"b": 1, "a": [1.0, "x", None]}) == b'{"a":[1.0,"x",null],"b":1}'  # unchanged
    assert canonical(b"ab") == b'{"$bytes":"6162"}' and canonical(Decimal("1.50")) == b'{"$decimal":"1.50"}'
    view = np.arange(6, dtype=np.int32).reshape(2, 3)[:, ::2]  # non-contiguous: orjson alone refuses it
    assert canonical(view) == canonical(np.ascontiguousarray(view)) == b"[[0,2],[3,5]]"
    assert canonical(torch.tensor([[0, 2], [3, 5]])) == b"[[0,2],[3,5]]"
    with pytest.raises(TypeError, match="set"):
        canonical({1, 2})


def test_value_counts_wide_and_negative_integers() -> None:
    p = StatsPartial(StatsConfig())
    p.update([{"a": v, "b": w} for v, w in [(0, -3), (10**9, -1), (0, -3), (-(10**9), 2.0)]])
    f = p.result()["fields"]
    assert f["a"]["numeric"]["value_counts"] == [
        {"value": -(10**9), "count": 1},
        {"value": 0, "count": 2},
        {"value": 10**9, "count": 1},
    ]
    assert f["b"]["numeric"]["value_counts"] == [
        {"value": -3, "count": 2},
        {"value": -1, "count": 1},
        {"value": 2, "count": 1},
    ]


def test_split_typed_csv_to_parquet_keeps_types(tmp_path: Path) -> None:
    path = tmp_path / "in/t.csv"
    path.parent.mkdir(parents=True)
    rows = [
        f"{k},{'NA' if k % 5 == 0 else k / 4},2021-03-{1 + k % 28:02d},{'true' if k % 2 else 'false'},w{k}"
        for k in range(200)
    ]
    path.write_text("id,x,day,flag,name\n" + "\n".join(rows) + "\n")
    out = tmp_path / "split"
    run_op("split", str(path), out, "--fractions", "a=0.5,b=0.5", "--output_format", "parquet")
    got = [r for p in sorted(out.glob("*/part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(got) == 200
    assert isinstance(got[0]["id"], int), got[0]
    by_id = {r["id"]: r for r in got}
    for k in range(200):
        r = by_id[k]
        assert r["x"] is None if k % 5 == 0 else r["x"] == k / 4 and type(r["x"]) is float
        assert r["day"] == dt.date(2021, 3, 1 + k % 28) and r["flag"] is bool(k % 2) and r["name"] == f"w{k}"
