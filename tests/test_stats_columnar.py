"""The columnar stats path (typed Arrow batches into the accumulators) gives the per-record profile.

The same typed CSV (NA cells, dates, timestamps, bools, strings, few-valued ints, floats with a
real NaN) is profiled from ``RecordBatch.to_pylist()`` records and from the Arrow batches, and
the two documents must agree: every count, top value and type exactly, every float to 1e-9.
The op itself takes the columnar path without ``--fn``, and the per-record one with an identity
``--fn``; the two ``stats.json`` agree too, and a value that does not fit still names its line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tdp_testutil import run_op

from torchx_datapipes.formats.planning import plan_units
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.stats import StatsConfig, StatsPartial, columnar

REL = 1e-9


def typed_csv(path: Path, n: int = 300) -> Path:
    rows = ["id,score,x,year,ok,day,at,cat,text,empty"]
    for i in range(n):
        score = "NA" if i % 7 == 3 else ("" if i % 11 == 5 else f"{i * 0.37 - 20:.3f}")
        x = "nan" if i % 13 == 4 else f"{(i * 7919) % 1000 / 3:.6f}"  # "nan": NaN once na_values drop it
        ok = "" if i % 9 == 0 else ("true" if i % 2 else "FALSE")
        day = "N/A" if i % 17 == 0 else f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
        rows.append(
            f"{i},{score},{x},{1990 + i % 4},{ok},{day},2024-03-01T{i % 24:02d}:{i % 60:02d}:0{i % 10}.25,"
            f'c{i % 5},"t {i % 50}, with a comma",'
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


def profile(path: Path, columnar: bool, config: StatsConfig, fmt: str = "auto") -> Dict[str, Any]:
    partial = StatsPartial(config)
    for unit in plan_units([(str(path), path.stat().st_size)], fmt):
        reader = UnitReader(unit, batch_size=64)
        if columnar:
            for batch, _ in reader.arrow_batches():
                partial.update_arrow(batch)
        else:
            for recs, _ in reader.batches():
                partial.update(recs)
    return partial.result()


def assert_same(a: Any, b: Any, where: str = "$") -> None:
    """Equal documents: floats to ``REL`` (relative), everything else exactly."""
    if isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=1e-12), (
            where, a, b
        )  # fmt: skip
    elif isinstance(a, dict) and isinstance(b, dict):
        assert list(a) == list(b), (where, list(a), list(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


NA = "--na_values"


@pytest.mark.parametrize("limit", [1000, 20])  # 20: the string columns switch to HLL/frequent items
def test_columnar_profile_equals_the_per_record_profile(
    tmp_path: Path, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(columnar, "_SAMPLE", 16)  # text (many distinct) is counted by a Counter, cat by Arrow
    path = typed_csv(tmp_path / "in/t.csv")
    fmt = "csv?na_values=NA%2CN%2FA%2C"  # "nan" is a value: x is a float column with real NaNs
    config = StatsConfig(exact_distinct_limit=limit)
    slow, fast = profile(path, False, config, fmt), profile(path, True, config, fmt)
    assert_same(fast, slow)
    chosen = StatsConfig(fields=("x", "cat", "absent"))  # --fields: only those, in that order
    assert_same(profile(path, True, chosen, fmt), profile(path, False, chosen, fmt))
    assert list(profile(path, True, chosen, fmt)["fields"]) == ["x", "cat", "absent"]
    f = fast["fields"]
    assert f["score"]["types"] == {"float": 300 - 43 - 27 + 4, "null": 43 + 27 - 4}  # NA, "" (4 both)
    assert f["x"]["nan"] == 23 and f["x"]["types"] == {"float": 300}
    assert f["year"]["numeric"]["value_counts"] == [{"value": 1990 + k, "count": 75} for k in range(4)]
    assert f["ok"]["bool"] == {"true": 133, "false": 133} and f["ok"]["null"] == 34
    assert f["day"]["types"] == {"date": 282, "null": 18} and f["day"]["date"]["min"] == "2024-01-01"
    assert f["at"]["datetime"]["timezone"] == {"aware": 0, "naive": 300}
    assert f["at"]["datetime"]["max"] == "2024-03-01T23:59:09.250000"
    assert f["cat"]["string"]["top"][0] == {"value": "c0", "count": 60, "lower": 60, "upper": 60}
    assert f["text"]["string"]["distinct"]["value"] == 50 and f["empty"]["types"] == {"null": 300}


def test_columnar_parquet_profile_equals_the_per_record_profile(tmp_path: Path) -> None:
    """Parquet too, with types the columnar path hands to the per-record code (lists, bytes, tz)."""
    n = 360  # < kll_k: the quantile sketches are exact (their compaction is random)
    t0 = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    table = pa.table(
        {
            "u8": pa.array([k % 7 for k in range(n)], pa.uint8()),
            "f32": pa.array([None if k % 5 == 0 else k / 8 for k in range(n)], pa.float32()),
            "ts_ms": pa.array(
                [dt.datetime(2021, 1, 1) + dt.timedelta(milliseconds=k * 1234567) for k in range(n)],
                pa.timestamp("ms"),
            ),  # fmt: skip
            "aware": pa.array([t0 + dt.timedelta(hours=k) for k in range(n)], pa.timestamp("us", "UTC")),
            "vec": pa.array([[float(k)] if k % 2 else [] for k in range(n)], pa.list_(pa.float64())),
            "blob": pa.array([bytes(k % 9) for k in range(n)], pa.binary()),
            "s": pa.array([f"v{k % 3}" for k in range(n)], pa.large_string()),
        }
    )
    path = tmp_path / "in/t.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=200)
    config = StatsConfig()
    assert_same(profile(path, True, config), profile(path, False, config))


def test_the_op_takes_the_columnar_path_and_agrees_with_the_per_record_op(tmp_path: Path) -> None:
    path = typed_csv(tmp_path / "in/t.csv")
    run_op("stats", str(path), tmp_path / "fast", "--batch_size", "50")
    run_op("stats", str(path), tmp_path / "slow", "--batch_size", "50", fn=identity)
    docs: List[Dict[str, Any]] = [
        json.loads((tmp_path / d / "stats.json").read_text()) for d in ("fast", "slow")
    ]
    for key in ("records", "records_in", "bad_records", "filtered"):
        assert docs[0][key] == docs[1][key] == (300 if key.startswith("rec") else 0)
    assert_same(docs[0]["fields"], docs[1]["fields"])


def test_a_value_that_does_not_fit_is_a_bad_record_naming_its_line_on_the_columnar_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "in/t.csv"
    path.parent.mkdir(parents=True)
    path.write_text('a,b,note\n1,2,"x\ny"\n3,oops,z\n5,6,w\n')
    m = run_op(
        "stats",
        str(path),
        tmp_path / "out",
        "--schema",
        "b:int",
        "--on_error",
        "skip",
        "--max_error_rate",
        "1",
    )
    assert m["bad"] == 1
    doc = json.loads((tmp_path / "out/stats.json").read_text())
    assert doc["records"] == 2 and doc["fields"]["b"]["numeric"]["sum"] == 8.0
    (err,) = [json.loads(x) for x in (tmp_path / "out/_errors/part-00000.jsonl").read_text().splitlines()]
    assert err["file"] == str(path) and err["line"] == 4  # the quoted newline: row 2 starts on line 4
    assert "column 'b'" in err["error"] and "'oops' is not a int" in err["error"] and err["raw"] == "3,oops,z"


def identity(r: Any) -> Any:
    return r
