"""Issue 23, item 7 (the input side): every failure names the file, line or row group, field and fix.

Each case runs the runner in-process (``main([...])``) as a user hits it.
"""

import json
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest
from tdp_testutil import read_output, run_op

from torchx_datapipes.errors import InputError
from torchx_datapipes.runner.badrecords import RecordError

MiB = 1 << 20
SKIP = ("--on_error", "skip", "--max_error_rate", "1")


def identity(r: Any) -> Any:
    return r


def errors_of(out: Path) -> List[Dict[str, Any]]:
    return [
        orjson.loads(x)
        for p in sorted((out / "_errors").glob("*.jsonl"))
        for x in p.read_bytes().splitlines()
    ]


def test_deep_nesting_with_a_big_integer_is_a_bad_record(tmp_path: Path) -> None:
    """Was an uncaught RecursionError killing the job under --on_error skip (formats/jsonl/bigints.py)."""
    deep = 1010  # orjson takes it; the exact parser (stdlib json, recursive) for 19+ digits cannot
    f = tmp_path / "d/deep.jsonl"
    f.parent.mkdir()
    f.write_text(
        '{"i": 1}\n{"x": ' + "[" * deep + "123456789012345678901234567890" + "]" * deep + '}\n{"i": 3}\n'
    )
    m = run_op("transform", str(f), tmp_path / "skip", *SKIP, fn=identity)
    assert m["bad"] == 1 and [r["i"] for r in read_output(tmp_path / "skip")] == [1, 3]
    (err,) = errors_of(tmp_path / "skip")
    assert err["file"] == str(f) and err["line"] == 2 and f"nests {deep + 1} levels deep" in err["error"]
    assert "RecursionError" not in err["error"] and "as strings" in err["error"]
    with pytest.raises(RecordError, match=rf"{f}, line 2: cannot parse record: the record nests"):
        run_op("transform", str(f), tmp_path / "raise", fn=identity)


def corrupt_parquet(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"id": list(range(2000)), "text": [f"hello world {i} " * 5 for i in range(2000)]})
    pq.write_table(t, path, row_group_size=1000, compression="snappy", use_dictionary=False)
    col = pq.ParquetFile(path).metadata.row_group(1).column(1)
    data = bytearray(path.read_bytes())
    for k in range(64):  # damage a page of column "text" in row group 1
        data[col.data_page_offset + 200 + k] ^= 0x5A
    path.write_bytes(bytes(data))
    return path


def test_corrupt_parquet_page_names_file_row_group_column_and_fix(tmp_path: Path) -> None:
    """Was only ``OSError: Corrupt snappy compressed data`` (or a thrift error): no file, no row group."""
    (tmp_path / "d").mkdir()
    f = corrupt_parquet(tmp_path / "d/t.parquet")
    with pytest.raises(RecordError) as e:
        run_op("transform", str(f), tmp_path / "raise", fn=identity)
    msg = str(e.value)
    assert msg.startswith(f"{f}: column 'text' of row group 1 (rows 1001..2000) cannot be decoded")
    assert "the file is damaged" in msg and "re-fetch the file or write it again" in msg and "\n" not in msg
    m = run_op("transform", str(f), tmp_path / "skip", *SKIP, fn=identity)
    assert len(read_output(tmp_path / "skip")) == 1000 and m["lost_bytes"] > 0
    (err,) = errors_of(tmp_path / "skip")
    assert err["file"] == str(f) and err["stage"] == "unit" and "row group 1" in err["error"]


def test_bom_only_files_are_empty_in_every_line_format(tmp_path: Path) -> None:
    """A BOM-only .csv gave "expected 0 fields"; .jsonl and .txt read as 0 records: now all do."""
    d = tmp_path / "d"
    d.mkdir()
    for name in ("a.csv", "b.jsonl", "c.txt", "e.tsv"):
        (d / name).write_bytes(b"\xef\xbb\xbf")
    (d / "f.csv").write_bytes(b"\xef\xbb\xbf\n\n")
    m = run_op("transform", str(d), tmp_path / "out", fn=identity)
    assert m["records_in"] == 0 and m["bad"] == 0
    assert read_output(tmp_path / "out") == []


def test_latin1_byte_in_csv_quarantines_its_row_only(tmp_path: Path) -> None:
    """Was: the whole file failed, even under skip, with a misleading --delimiter hint."""
    f = tmp_path / "d/people.csv"
    f.parent.mkdir()
    f.write_bytes(b"id,name,city\n1,Ann,Paris\n2,Jos\xe9,Lyon\n3,Bob,Nice\n")
    m = run_op("transform", str(f), tmp_path / "skip", *SKIP, fn=identity)
    assert m["bad"] == 1 and m["records_in"] == 3
    assert read_output(tmp_path / "skip") == [{"id": 1, "name": "Ann", "city": "Paris"},
                                             {"id": 3, "name": "Bob", "city": "Nice"}]  # fmt: skip
    (err,) = errors_of(tmp_path / "skip")
    assert err["file"] == str(f) and err["line"] == 3 and err["raw"] == "2,Jos\\xe9,Lyon"
    assert (
        "column 'name': not UTF-8 text (byte 0xe9" in err["error"] and "convert it to UTF-8" in err["error"]
    )
    with pytest.raises(RecordError) as e:
        run_op("transform", str(f), tmp_path / "raise", fn=identity)
    assert f"{f}, line 3" in str(e.value) and "latin-1" in str(e.value) and "--delimiter" not in str(e.value)


def test_csv_with_a_6_mib_quoted_field_reads(tmp_path: Path) -> None:
    """Was: "straddling object ... (try to increase block size?)", which a user cannot do."""
    f = tmp_path / "d/long.csv"
    f.parent.mkdir()
    big = "w " * (3 * MiB)
    f.write_text(f'id,text\n1,"{big}"\n2,short\n')
    m = run_op("transform", str(f), tmp_path / "out", fn=lambda r: {"id": r["id"], "n": len(r["text"])})
    assert m["bad"] == 0 and read_output(tmp_path / "out") == [{"id": 1, "n": 6 * MiB}, {"id": 2, "n": 5}]
    # over the bound: a bad record naming file, line and size; the parser never holds it
    with pytest.raises(RecordError) as e:
        run_op("transform", str(f), tmp_path / "small", "--max_record_mb", "4", fn=identity)
    msg = str(e.value)
    assert f"{f}, line 2: cannot parse record: the CSV record" in msg and f"{6 * MiB + 4:,} bytes" in msg
    assert "--max_record_mb" in msg


def test_csv_rows_over_the_bound_are_quarantined_and_later_lines_stay_exact(tmp_path: Path) -> None:
    f = tmp_path / "d/rows.csv"
    f.parent.mkdir()
    big, big2 = "x" * (3 * MiB), "y" * MiB
    f.write_text(f'id,text\n0,"q\nr"\n1,"{big}"\n2,"a\nb"\n3,"{big2}\n{big2}\n{big2}"\n4,last\n5,"{big}"')
    m = run_op("transform", str(f), tmp_path / "out", "--max_record_mb", "2", *SKIP,
               fn=lambda r: {"id": r["id"], "n": len(r["text"])})  # fmt: skip
    assert read_output(tmp_path / "out") == [{"id": 0, "n": 3}, {"id": 2, "n": 3}, {"id": 4, "n": 4}]
    assert m["bad"] == 3 and m["records_in"] == 6 and m["blank_lines"] == 0
    errs = errors_of(tmp_path / "out")
    assert [e["line"] for e in errs] == [4, 7, 11] and all(e["file"] == str(f) for e in errs)
    assert f"is {3 * MiB + 4:,} bytes" in errs[0]["error"] and f"is {3 * MiB + 6:,} bytes" in errs[1]["error"]


def test_max_record_mb_is_checked_on_the_client() -> None:
    from torchx_datapipes.components import transform

    with pytest.raises(ValueError, match=r"--max_record_mb must be > 0; got 0"):
        transform(fn="f.py:f", input="in", output="out", max_record_mb=0)
    assert "max_record_mb" in (transform.__doc__ or "")


def test_json_stays_exact_for_big_integers(tmp_path: Path) -> None:
    """The exact path still works for ordinary nesting (the recursion guard changes nothing there)."""
    f = tmp_path / "d/a.jsonl"
    f.parent.mkdir()
    f.write_text(json.dumps({"x": [[[123456789012345678901234567890]]]}) + "\n")
    run_op("transform", str(f), tmp_path / "out", fn=identity)
    assert b"123456789012345678901234567890" in (tmp_path / "out/part-00000.jsonl").read_bytes()


def test_deep_json_document_names_the_file_and_the_nesting(tmp_path: Path) -> None:
    f = tmp_path / "d/deep.json"
    f.parent.mkdir()
    f.write_text('[{"x": ' + "[" * 1010 + "12345678901234567890123" + "]" * 1010 + "}]")
    with pytest.raises(InputError, match=rf"^{f}: the record nests 1012 levels deep"):
        run_op("transform", str(f), tmp_path / "out", "--on_error", "skip", fn=identity)
