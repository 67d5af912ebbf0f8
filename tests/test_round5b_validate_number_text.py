"""Issue 32 item 4: one word in a CSV number column is one ``type_mismatch``, with its line.

A word anywhere in a float column makes the reader type the whole column ``string`` in every batch
(1 MiB blocks); only the cell that is not a number is an anomaly, and the numbers read as text still
get the numeric rules. A diamonds-like CSV (10 columns, 50,000 rows, 2.4 MB: three batches) made here."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Dict, List

import pytest
from tdp_testutil import run_op

from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.schema.validate import AnomaliesFoundError

HEADER = "carat,cut,color,clarity,depth,table,price,x,y,z"
ROWS = 50_000


def diamonds(n: int, seed: int) -> List[List[str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        carat = round(rng.lognormvariate(-0.4, 0.5), 2)
        x = round(3.9 + 2.3 * carat, 2)
        out.append(
            [
                f"{carat}",
                rng.choice(("Ideal", "Premium", "Very Good", "Good", "Fair")),
                rng.choice("DEFGHIJ"),
                rng.choice(("SI2", "SI1", "VS1", "VS2", "VVS2", "VVS1", "I1", "IF")),
                f"{round(rng.gauss(61.7, 1.4), 1)}",
                f"{rng.choice((55.0, 56.0, 57.0, 58.0, 59.0))}",
                str(int(300 + 4000 * carat * carat)),
                f"{x}",
                f"{round(x * rng.uniform(0.98, 1.02), 2)}",
                f"{round(x * 0.62, 2)}",
            ]
        )
    return out


def write(path: Path, rows: List[List[str]]) -> None:
    path.write_text(HEADER + "\n" + "\n".join(",".join(r) for r in rows) + "\n")


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("diamonds")
    write(root / "train.csv", diamonds(ROWS, seed=0))
    run_op("stats", str(root / "train.csv"), root / "st")
    assert schema_main(["infer", str(root / "st"), "-o", str(root / "s.json"), "--ranges"]) == 0
    return root / "s.json"


def validate(schema: Path, csv: Path, out: Path) -> List[Dict[str, Any]]:
    with pytest.raises(AnomaliesFoundError) as e:
        run_op("validate", str(csv), out, "--schema", str(schema))
    assert f"{csv.name}:" in str(e.value)
    return json.loads((out / "anomalies.json").read_text())  # type: ignore[no-any-return]


def test_one_word_in_a_float_column_is_one_anomaly_with_its_line(schema: Path, tmp_path: Path) -> None:
    rows = diamonds(ROWS, seed=0)  # the training rows, one cell changed
    rows[4][0] = "abc"  # data row 5: file line 6 (the header is line 1)
    csv = tmp_path / "new.csv"
    write(csv, rows)
    assert csv.stat().st_size > 2 * (1 << 20)  # several reader batches: the later ones hold no word
    found = validate(schema, csv, tmp_path / "v")
    mismatches = [a for a in found if a["kind"] == "type_mismatch"]
    assert [(a["field"], a["count"]) for a in mismatches] == [("carat", 1)]
    assert [(x["file"], x["line"], x["value"]) for x in mismatches[0]["examples"]] == [(str(csv), 6, "abc")]
    assert "numbers and were checked" in mismatches[0]["description"]
    assert [a["kind"] for a in found] == ["type_mismatch"]  # no valid float cited as anything else


def test_numbers_read_as_text_still_get_the_numeric_rules(schema: Path, tmp_path: Path) -> None:
    rows = diamonds(ROWS, seed=0)
    rows[45_000][0] = "n/a?"  # a word in the third batch: the column is text in every batch
    rows[100][0] = "99.5"  # out of the inferred range, in the first batch
    rows[48_000][6] = "12.5"  # not an int in the int price column (read as float by the reader)
    csv = tmp_path / "new.csv"
    write(csv, rows)
    got = {(a["field"], a["kind"]): a for a in validate(schema, csv, tmp_path / "v")}
    cells = {k: [(x["line"], x["value"]) for x in a["examples"]] for k, a in got.items()}
    assert cells[("carat", "type_mismatch")] == [(45_002, "n/a?")]
    assert got[("carat", "type_mismatch")]["count"] == 1
    assert cells[("carat", "out_of_range")] == [(102, "99.5")]
    assert got[("carat", "out_of_range")]["count"] == 1
    assert cells[("price", "type_mismatch")] == [(48_002, 12.5)]
    assert (
        got[("price", "type_mismatch")]["count"] == 1
        and "read as float" in got[("price", "type_mismatch")]["description"]
    )
