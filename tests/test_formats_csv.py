"""Issue 10: typed CSV/TSV input (pyarrow parser, whole-file inference, file lines for errors)."""

import datetime as dt
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest
from tdp_testutil import read_output, run_op

from torchx_datapipes.formats.csv import infer as csv_infer
from torchx_datapipes.formats.csv import input as csv_mod
from torchx_datapipes.formats.planning import plan_units
from torchx_datapipes.formats.reading import UnitReader


def type_names(r: Dict[str, Any]) -> Dict[str, Any]:
    """Each field as (type name, value as JSON can hold it)."""
    return {
        k: [type(v).__name__, v.isoformat() if isinstance(v, (dt.date, dt.datetime)) else v]
        for k, v in r.items()
    }


def read_all(path: Path, fmt: str = "auto") -> List[Any]:
    (unit,) = plan_units([(str(path), path.stat().st_size)], fmt)
    reader = UnitReader(unit)
    return [(line, rec) for recs, lines in reader.batches() for rec, line in zip(recs, lines)]


def real_csv(path: Path, n: int = 300) -> Path:
    """Quoted commas and newlines, NA cells, dates, timestamps, booleans, a BOM, and a column that
    holds only integers in its first n rows and a float in its last row."""
    rows = ["id,name,score,day,at,ok,late"]
    for i in range(n):
        score = "NA" if i % 7 == 3 else ("" if i % 11 == 5 else str(i * 0.25))
        rows.append(f'{i},"Doe, J{i}",{score},2024-03-{1 + i % 28:02d},2024-03-01T12:00:{i % 60:02d},'
                    f"{'true' if i % 2 else 'false'},{i}")  # fmt: skip
    rows.append(f'{n},"two\nlines",N/A,2024-04-01,2024-04-01 08:30:00,TRUE,2.5')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xef\xbb\xbf" + ("\n".join(rows) + "\n").encode())
    return path


def test_typed_records_over_many_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_mod, "_BLOCK", 512)  # many parser blocks: lines across them
    monkeypatch.setattr(csv_infer, "_BLOCK", 512)  # and inference: the float comes blocks after the ints
    f = real_csv(tmp_path / "d/a.csv")
    got = read_all(f)
    assert len(got) == 301
    line, first = got[0]
    assert line == 2 and first == {
        "id": 0, "name": "Doe, J0", "score": 0.0, "day": dt.date(2024, 3, 1),
        "at": dt.datetime(2024, 3, 1, 12, 0, 0), "ok": False, "late": 0.0,
    }  # fmt: skip
    assert type(first["late"]) is float  # int in the first 300 rows, 2.5 in the last: float for all
    assert [r["score"] for _, r in got[3:6]] == [None, 1.0, None]  # NA and "" are null
    assert got[10][1]["score"] is None and got[16][1]["score"] is None and got[11][1]["score"] == 2.75
    line, last = got[-1]
    assert line == 302 and last["name"] == "two\nlines" and last["score"] is None and last["ok"] is True
    assert last["at"] == dt.datetime(2024, 4, 1, 8, 30)
    assert [ln for ln, _ in got] == list(range(2, 303))


def test_transform_writes_typed_values_and_the_same_types_for_every_unit(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.csv").write_text("k,v,w\n1,10,x\n2,20,y\n")
    (d / "b.csv").write_text("k,v,w\n3,0.5,7\n")  # v: int + float -> float; w: string + int -> string
    run_op("transform", str(d), tmp_path / "o", "--num_workers", "1", fn=type_names)
    out = read_output(tmp_path / "o")
    assert [r["v"] for r in out] == [["float", 10.0], ["float", 20.0], ["float", 0.5]]
    assert [r["w"] for r in out] == [["str", "x"], ["str", "y"], ["str", "7"]]
    assert [r["k"][0] for r in out] == ["int"] * 3


def test_schema_overrides_and_a_value_that_does_not_fit_is_a_bad_record(tmp_path: Path) -> None:
    f = tmp_path / "d/zips.csv"
    f.parent.mkdir()
    f.write_text('zip,n,note\n00501,1,"a\nb"\n02134,x,c\n10001,3,d\n')
    m = run_op(
        "transform", str(f), tmp_path / "o", "--schema", "zip:str,n:int", "--on_error", "skip",
        "--max_error_rate", "1", fn=type_names,
    )  # fmt: skip
    assert m["bad"] == 1
    out = read_output(tmp_path / "o")
    assert [r["zip"] for r in out] == [["str", "00501"], ["str", "10001"]]
    assert [r["n"] for r in out] == [["int", 1], ["int", 3]]
    (err,) = [orjson.loads(x) for x in (tmp_path / "o/_errors/part-00000.jsonl").read_bytes().splitlines()]
    assert err["file"] == str(f) and err["line"] == 4  # the quoted newline makes row 2 start on line 4
    assert (
        "column 'n'" in err["error"]
        and "'x' is not a int" in err["error"]
        and "--schema 'n:str'" in err["error"]
    )
    assert err["raw"] == "02134,x,c"


def test_schema_naming_a_missing_column_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(Exception, match=r"--schema names column\(s\) 'c'.*columns: a, b"):
        plan_units([(str(f), f.stat().st_size)], "auto?schema=c%3Aint")


def test_na_values_delimiter_and_tsv(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("a;b\n-;NA\n2;x\n")
    got = [r for _, r in read_all(f, "auto?delimiter=%3B&na_values=-")]
    assert got == [{"a": None, "b": "NA"}, {"a": 2, "b": "x"}]  # only "-" is null now
    t = tmp_path / "b.tsv"
    t.write_text("a\tb\n1\thello, world\n")
    assert [r for _, r in read_all(t)] == [{"a": 1, "b": "hello, world"}]


def test_blank_lines_are_counted_and_lines_stay_right(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_bytes(b'a,b\r\n1,2\r\n\r\n3,"x\r\ny"\r\n\r\n5,6\r\n')
    (unit,) = plan_units([(str(f), f.stat().st_size)])
    reader = UnitReader(unit)
    got = [(ln, r) for recs, lines in reader.batches() for r, ln in zip(recs, lines)]
    assert got == [(2, {"a": 1, "b": "2"}), (4, {"a": 3, "b": "x\r\ny"}), (7, {"a": 5, "b": "6"})]
    assert reader.blank == 2


def test_cli_options_reach_the_runner(tmp_path: Path) -> None:
    f = tmp_path / "d/a.csv"
    f.parent.mkdir()
    f.write_text("a|b\n1|2\n")
    run_op("transform", str(f), tmp_path / "o", "--delimiter", "pipe", "--schema", "b:str", fn=type_names)
    assert read_output(tmp_path / "o") == [{"a": ["int", 1], "b": ["str", "2"]}]


def test_types_do_not_depend_on_workers(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    for k in range(3):  # the float is in the last file only: every unit still reads v as float
        (d / f"p{k}.csv").write_text(
            "v,s\n" + "".join(f"{k * 10 + i},{i}\n" for i in range(5)) + ("0.5,x\n" if k == 2 else "")
        )
    for w in ("1", "2"):
        run_op("transform", str(d), tmp_path / f"o{w}", "--num_workers", w, fn=type_names)
    one, two = read_output(tmp_path / "o1"), read_output(tmp_path / "o2")
    assert one == two and {r["v"][0] for r in one} == {"float"} and {r["s"][0] for r in one} == {"str"}


def test_integers_beyond_int64_keep_their_digits(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("a,b\n1,12345678901234567890123\n2,5\n")
    assert [r for _, r in read_all(f)] == [{"a": 1, "b": "12345678901234567890123"}, {"a": 2, "b": "5"}]


def test_truncated_compressed_csv_is_refused_when_planning_naming_the_file(tmp_path: Path) -> None:
    import gzip

    from torchx_datapipes.errors import InputError

    f = tmp_path / "a.csv.gz"
    data = gzip.compress(("a,b\n" + "".join(f"{i},x{i}\n" for i in range(5000))).encode())
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=rf"{f}: gzip stream ends before its end-of-stream marker"):
        plan_units([(str(f), f.stat().st_size)])
