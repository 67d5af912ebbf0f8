"""Issue 19 point 3: inputs a user has. Duplicate column names (CSV, Parquet) renamed like pandas and
reported; repeated JSON keys are bad records; ``--header false``; strptime formats in ``--schema``;
the lists of input formats in the docs and help come from the registry."""

import datetime as dt
import inspect
import io
import re
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pandas as pd
import pytest
from tdp_testutil import read_output, run_op

from torchx_datapipes import components, ops
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.formats import columns, registry, spec

ROOT = Path(__file__).resolve().parent.parent


def identity(r: Dict[str, Any]) -> Dict[str, Any]:
    return r


def typed(r: Dict[str, Any]) -> Dict[str, Any]:
    return {k: [type(v).__name__, v.isoformat() if isinstance(v, (dt.date, dt.datetime)) else v]
            for k, v in r.items()}  # fmt: skip


def errors(out: Path) -> List[Dict[str, Any]]:
    return [
        orjson.loads(x)
        for p in sorted((out / "_errors").glob("*.jsonl"))
        for x in p.read_bytes().splitlines()
    ]


@pytest.mark.parametrize(
    "header",
    [["x", "y", "x"], ["x", "x", "x"], ["x", "x.1", "x", "x"], ["x", "x", "x.1"], ["a", "a.1", "a", "a.1"],
     ["0", "1", "0", "0"]],
)  # fmt: skip
def test_dedup_names_like_pandas(header: List[str]) -> None:
    text = ",".join(header) + "\n" + ",".join("1" for _ in header) + "\n"
    assert columns.dedup(header) == [str(c) for c in pd.read_csv(io.StringIO(text)).columns]


# -- 1. duplicate names ---------------------------------------------------------------------
def test_csv_header_with_a_repeated_name_keeps_every_column(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "d/dup.csv"
    f.parent.mkdir()
    f.write_text("x,y,x\n1,2,3\n4,5,6\n")
    m = run_op("transform", str(f), tmp_path / "o", fn=identity)
    assert read_output(tmp_path / "o") == [{"x": 1, "y": 2, "x.1": 3}, {"x": 4, "y": 5, "x.1": 6}]
    assert m["renamed_columns"] == {str(f): [{"column": 3, "from": "x", "to": "x.1"}]}
    err = capfd.readouterr().err
    assert f"warning: {f}: duplicate column names renamed: column 3 'x' -> 'x.1'" in err


def test_csv_without_duplicates_has_no_renamed_columns_entry(tmp_path: Path) -> None:
    f = tmp_path / "a.csv"
    f.write_text("x,y\n1,2\n")
    assert "renamed_columns" not in run_op("transform", str(f), tmp_path / "o", fn=identity)


def _wide_headerless(path: Path, rows: int = 40) -> None:
    """65 columns, no header; the first row holds 16 distinct values (as in the issue's real file)."""
    lines = []
    for i in range(rows):
        cells = [str((j % 16) if i == 0 else (i * j) % 7) for j in range(64)]
        lines.append(",".join(cells + [str(i % 3)]))  # the label, last
    path.write_text("\n".join(lines) + "\n")


def test_headerless_wide_csv_keeps_its_65_columns_in_stats(tmp_path: Path) -> None:
    f = tmp_path / "wide.csv"
    _wide_headerless(f)
    m = run_op("stats", str(f), tmp_path / "o")  # read with a header: the first row gives 65 names
    doc = orjson.loads((tmp_path / "o/stats.json").read_bytes())
    assert len(doc["fields"]) == 65 and len(m["renamed_columns"][str(f)]) == 65 - 16
    m = run_op("stats", str(f), tmp_path / "o2", "--header", "false")
    doc = orjson.loads((tmp_path / "o2/stats.json").read_bytes())
    assert sorted(doc["fields"], key=int) == [str(i) for i in range(65)]
    assert "renamed_columns" not in m
    assert doc["fields"]["64"]["numeric"]["max"] == 2 and doc["fields"]["0"]["numeric"]["max"] == 0


def test_parquet_with_duplicate_column_names_is_renamed(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "d.parquet"
    t = pa.Table.from_arrays(
        [pa.array([1, 2]), pa.array(["a", "b"]), pa.array([0.5, 1.5])], names=["x", "y", "x"]
    )
    pq.write_table(t, f)
    m = run_op("transform", str(f), tmp_path / "o", fn=identity)
    assert read_output(tmp_path / "o") == [{"x": 1, "y": "a", "x.1": 0.5}, {"x": 2, "y": "b", "x.1": 1.5}]
    assert m["renamed_columns"] == {str(f): [{"column": 3, "from": "x", "to": "x.1"}]}


@pytest.mark.parametrize("batch", ["1", "3", "1024"])
def test_json_lines_repeating_a_key_are_renamed_like_csv_headers(
    tmp_path: Path, batch: str, capfd: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(
        '{"x": 1, "y": 2, "x": 3}\n{"at": "12:00:00", "url": "http://a"}\n{"a": {"b": 1, "b": 2}}\n{"x": 1}\n'
        '{"n": 123456789012345678901234567890, "m": {"k": [1, {"z": 2}]}, "n": 7, "x.1": 0, "x": 5}\n'
    )
    m = run_op("transform", str(f), tmp_path / "o", "--batch_size", batch, fn=identity)
    assert read_output(tmp_path / "o")[:4] == [
        {"x": 1, "y": 2, "x.1": 3},
        {"at": "12:00:00", "url": "http://a"},
        {"a": {"b": 1, "b.1": 2}},
        {"x": 1},
    ]  # no value lost
    written = b"".join(p.read_bytes() for p in sorted((tmp_path / "o").glob("part-*.jsonl")))
    assert b'{"n":123456789012345678901234567890,"m":{"k":[1,{"z":2}]},"n.1":7,"x.1":0,"x":5}' in written
    assert m["bad"] == 0 and m["renamed_keys"] == 3
    err = capfd.readouterr().err
    assert f"{f}, line 1: repeated JSON keys renamed: 'x' -> 'x.1'" in err
    assert f"{f}, line 3: repeated JSON keys renamed: 'b' -> 'b.1'" in err
    assert f"{f}, line 5: repeated JSON keys renamed: 'n' -> 'n.1'" in err


def test_json_document_items_repeating_a_key_are_renamed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "d.json"
    f.write_text('[{"x": 1, "x": 2}, {"t": "1:2"}, {"q": [{"r": 1, "r": 2}]}]')
    m = run_op("transform", str(f), tmp_path / "o", fn=identity)
    assert read_output(tmp_path / "o") == [{"x": 1, "x.1": 2}, {"t": "1:2"}, {"q": [{"r": 1, "r.1": 2}]}]
    assert m["bad"] == 0 and m["renamed_keys"] == 2
    err = capfd.readouterr().err
    assert f"{f}, item 1: repeated JSON keys renamed: 'x' -> 'x.1'" in err and f"{f}, item 3:" in err


# -- 2. --header false ------------------------------------------------------------------------
def test_header_false_names_columns_0_to_n_minus_1_and_infers_types(tmp_path: Path) -> None:
    f = tmp_path / "h.csv"
    f.write_text("1,a,2024-03-01\n2,b,2024-03-02\n")
    run_op("transform", str(f), tmp_path / "o", "--header", "false", fn=typed)
    assert read_output(tmp_path / "o") == [
        {"0": ["int", 1], "1": ["str", "a"], "2": ["date", "2024-03-01"]},
        {"0": ["int", 2], "1": ["str", "b"], "2": ["date", "2024-03-02"]},
    ]
    run_op("transform", str(f), tmp_path / "o2", "--header", "no", "--schema", "0:float", fn=typed)
    assert [r["0"] for r in read_output(tmp_path / "o2")] == [["float", 1.0], ["float", 2.0]]


def test_header_false_takes_names_from_a_schema_listing_every_column(tmp_path: Path) -> None:
    f = tmp_path / "h.csv"
    f.write_text("1,a,2024-03-01\n2,b,x\n")
    m = run_op(
        "transform", str(f), tmp_path / "o", "--header", "0", "--schema", "id:str,name:str,day:date",
        "--on_error", "skip", "--max_error_rate", "1", fn=typed,
    )  # fmt: skip
    assert read_output(tmp_path / "o") == [
        {"id": ["str", "1"], "name": ["str", "a"], "day": ["date", "2024-03-01"]}
    ]
    (err,) = errors(tmp_path / "o")
    assert m["bad"] == 1 and err["line"] == 2 and "column 'day'" in err["error"]
    with pytest.raises(Exception, match=r"--header false.*0\.\.n-1"):  # 2 names for 3 columns
        run_op(
            "transform", str(f), tmp_path / "o3", "--header", "false", "--schema", "id:int,name:str", fn=typed
        )


def test_header_option_in_the_spec_and_the_format_spec() -> None:
    for op in ("transform", "split", "stats"):
        assert [o for o in ops.SPECS[op].options if o.name == "header"][0].type == "bool"
    encoded = spec.encode_spec("csv", "a:int", None, "", False)
    assert spec.decode_spec(encoded)[1].header is False
    assert spec.decode_spec(spec.encode_spec("csv", "a:int"))[1].header is True


# -- 3. strptime formats ------------------------------------------------------------------------
def test_schema_with_strptime_formats_types_dates_and_names_a_bad_cell(tmp_path: Path) -> None:
    f = tmp_path / "d/dates.csv"
    f.parent.mkdir()
    f.write_text("d,at,n\n2024/03/01,01.02.2024 10:30,1\n2024/3/2,02.02.2024 11:05,2\n03-01-2024,x,3\n")
    m = run_op(
        "transform", str(f), tmp_path / "o", "--schema", "d:date[%Y/%m/%d],at:timestamp[%d.%m.%Y %H:%M]",
        "--on_error", "skip", "--max_error_rate", "1", fn=typed,
    )  # fmt: skip
    assert read_output(tmp_path / "o") == [
        {"d": ["date", "2024-03-01"], "at": ["datetime", "2024-02-01T10:30:00"], "n": ["int", 1]},
        {"d": ["date", "2024-03-02"], "at": ["datetime", "2024-02-02T11:05:00"], "n": ["int", 2]},
    ]
    (err,) = errors(tmp_path / "o")
    assert m["bad"] == 1 and err["file"] == str(f) and err["line"] == 4 and err["raw"] == "03-01-2024,x,3"
    assert "column 'd': '03-01-2024' is not a date in the format '%Y/%m/%d'" in err["error"]


@pytest.mark.parametrize(
    "schema, needle",
    [("d:date[%Q]", "%Q"), ("d:date[]", "no directive"), ("d:int[%Y]", "only date and timestamp"),
     ("t:timestamp[%Y-%m-%d %H:%M:%S.%f]", "%f"), ("d:date[%Y", "column:type")],
)  # fmt: skip
def test_invalid_date_format_is_refused_on_the_client(tmp_path: Path, schema: str, needle: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(needle)):
        components.transform(
            fn="t.py:f", input=str(tmp_path / "a.csv"), output=str(tmp_path / "o"), schema=schema
        )


@pytest.mark.parametrize("value", ["maybe", "2", ""])
def test_bad_header_value_is_refused_on_the_client(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--header"):
        components.stats(input=str(tmp_path / "a.csv"), output=str(tmp_path / "o"), header=value)


def test_header_reaches_the_runner_command(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1,2\n")
    app = components.stats(input=str(tmp_path / "a.csv"), output=str(tmp_path / "o"), header="no")
    assert "--header False" in app.roles[0].args[-1]


# -- 4. format lists from the registry ----------------------------------------------------------
def _named(text: str) -> List[str]:
    return [n for n in registry.builtin_input_names() if re.search(rf"\b{n}\b", text)]


def test_docs_options_lists_every_registered_format() -> None:
    from importlib import util

    spec = util.spec_from_file_location("gen_format_docs", ROOT / "scripts/gen_format_docs.py")
    assert spec is not None and spec.loader is not None
    gen = util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rows = [ln for ln in (ROOT / "docs/options.md").read_text().splitlines() if ln.startswith("| `format` |")]
    assert rows == [gen.format_row()], "run python scripts/gen_format_docs.py"
    assert _named(rows[0]) == list(registry.builtin_input_names())


def test_format_help_and_component_docstrings_list_every_registered_format() -> None:
    help_text = [o for o in ops.SPECS["transform"].options if o.name == "format"][0].help
    assert _named(help_text) == list(registry.builtin_input_names())
    for op in ("transform", "split", "stats"):
        doc = inspect.getdoc(getattr(components, op)) or ""
        block = doc.split("\n    format:", 1)[1].split(
            "\n    output_format:" if op == "transform" else "\n    schema:"
        )[0]
        assert _named(block) == list(registry.builtin_input_names()), op


@pytest.mark.parametrize(
    "fmt, extra, message",
    [
        (
            "jsonl",
            {"delimiter": ";"},
            r"--delimiter is not read by --format jsonl \(it takes no format option\)",
        ),
        ("json", {"schema": "a:int", "header": "false"}, r"--schema, --header are not read by --format json"),
        ("parquet", {"na_values": "-"}, r"--na_values is not read by --format parquet.*use --format csv"),
    ],
)
def test_a_format_option_the_format_does_not_read_is_refused_on_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, extra: Dict[str, str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(InvalidArgumentError, match=message):
        components.transform(
            fn="t.py:f", input=str(tmp_path / "in"), output=str(tmp_path / "o"), format=fmt, **extra
        )
    # the format that reads them takes them, and auto checks nothing (its files may be of any format)
    components.transform(fn="t.py:f", input=str(tmp_path / "in"), output=str(tmp_path / "o"), delimiter=";")
