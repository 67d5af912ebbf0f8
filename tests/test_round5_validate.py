"""Issue 32, item 5: a schema field absent from the whole input (a column removed from the CSV
header) is ``missing_field`` (TFDV's "column dropped"), whatever the schema's presence rules; a
column that is there but empty keeps the presence rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
from tdp_testutil import run_op

from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.schema.validate import AnomaliesFoundError


def flights(path: Path, n: int, columns: List[str]) -> Path:
    """A flights-shaped CSV (``dep_delay`` NA in one row of 5, ``tailnum`` always there)."""
    rows = []
    for i in range(n):
        delay = "NA" if i % 5 == 2 else str(i % 40 - 5)
        row = {"year": "2013", "carrier": ("UA", "AA", "B6")[i % 3], "dep_delay": delay,
               "tailnum": f"N{100 + i}", "air_time": str(120 + i % 60)}  # fmt: skip
        rows.append(",".join(row[c] for c in columns))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(",".join(columns) + "\n" + "\n".join(rows) + "\n")
    return path


ALL = ["year", "carrier", "dep_delay", "tailnum", "air_time"]


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("round5-validate")
    run_op("stats", str(flights(root / "train/a.csv", 200, ALL)), root / "stats")
    assert schema_main(["infer", str(root / "stats"), "-o", str(root / "schema.json")]) == 0
    doc = json.loads((root / "schema.json").read_text())
    assert doc["fields"]["tailnum"]["required"] and not doc["fields"]["dep_delay"]["required"]
    assert doc["fields"]["dep_delay"]["min_fraction"] > 0
    doc["fields"]["air_time"].update(required=False, min_fraction=0.0)  # no presence rule at all
    (root / "schema.json").write_text(json.dumps(doc))
    return root / "schema.json"


def anomalies(out: Path) -> Dict[tuple[str, str], Dict[str, Any]]:
    return {(a["field"], a["kind"]): a for a in json.loads((out / "anomalies.json").read_text())}


def test_columns_removed_from_the_header_are_missing_field(schema: Path, tmp_path: Path) -> None:
    f = flights(tmp_path / "new/b.csv", 50, ["year", "carrier"])  # dep_delay, tailnum, air_time dropped
    with pytest.raises(AnomaliesFoundError) as e:
        run_op("validate", str(f), tmp_path / "v", "--schema", str(schema))
    got = anomalies(tmp_path / "v")
    for name in ("dep_delay", "tailnum", "air_time"):  # optional, required, and no presence rule
        a = got[(name, "missing_field")]
        assert a["severity"] == "error" and a["count"] == 50, a
        assert f"{name!r} is absent from all 50 records" in a["description"]
        assert "dropped" in a["description"] and "remove" in a["description"]
        assert (name, "low_presence") not in got
    assert got[("tailnum", "missing_field")]["examples"][0]["file"] == str(f)  # a required one's records
    assert [k for k in got if k[1] == "missing_field"] == [
        (n, "missing_field") for n in ("air_time", "dep_delay", "tailnum")
    ]
    assert "tailnum: missing_field" in str(e.value)


def test_a_column_present_but_empty_keeps_the_presence_rules(schema: Path, tmp_path: Path) -> None:
    f = tmp_path / "new/c.csv"
    f.parent.mkdir(parents=True)
    good = flights(tmp_path / "tmp.csv", 40, ALL).read_text().splitlines()
    f.write_text(
        "\n".join([good[0]] + [",".join(r.split(",")[:2] + ["NA"] + r.split(",")[3:]) for r in good[1:]])
        + "\n"
    )
    with pytest.raises(AnomaliesFoundError):
        run_op("validate", str(f), tmp_path / "v", "--schema", str(schema))
    got = anomalies(tmp_path / "v")
    assert ("dep_delay", "low_presence") in got and ("dep_delay", "missing_field") not in got
