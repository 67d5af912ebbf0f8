"""A record a writer cannot serialize names its input file and line, and --on_error skip skips it."""

import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.errors import DatapipesError

BAD_ID = 6  # the record on line 7 of the input


def _bad_for(fmt: str, r: Dict[str, Any]) -> Any:
    if fmt == "jsonl":
        return {"id": r["id"], "raw": b"\x00\x01"}
    if fmt == "parquet":
        return {"id": r["id"], "t": torch.ones(2, dtype=torch.bfloat16)}  # numpy has no bfloat16
    return {"__key__": "has.dot", "id": r["id"]}


def make_fn(fmt: str) -> Any:
    def fn(r: Dict[str, Any]) -> Any:
        if r["id"] == BAD_ID:
            return _bad_for(fmt, r)
        if fmt == "parquet":
            return {"id": r["id"], "t": np.ones(2, dtype=np.float32)}
        return {"id": r["id"], "t": np.arange(3, dtype=np.int16)}

    return fn


@pytest.fixture
def inp(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "in/data.jsonl", [{"id": i} for i in range(10)])


def _errors(out: Path) -> List[Dict[str, Any]]:
    return [
        json.loads(x) for p in sorted((out / "_errors").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]


@pytest.mark.parametrize(
    "fmt,why",
    [
        (
            "jsonl",
            "field raw: bytes cannot be written as JSON Lines; write --output_format parquet or webdataset",
        ),
        ("parquet", "bfloat16"),
        ("webdataset", "__key__ 'has.dot' contains a '.'"),
    ],
)
def test_serialization_failure_names_file_and_line(tmp_path: Path, inp: Path, fmt: str, why: str) -> None:
    fn = make_fn(fmt)
    with pytest.raises(DatapipesError, match=r"data\.jsonl, line 7: ") as e:
        run_op("transform", str(inp), tmp_path / "o", "--output_format", fmt, fn=fn)
    assert why in str(e.value)
    m = run_op(
        "transform", str(inp), tmp_path / "o2", "--output_format", fmt, "--on_error", "skip",
        "--max_error_rate", "1", fn=fn,
    )  # fmt: skip
    assert m["bad"] == 1 and m["records_out"] == 9
    (err,) = _errors(tmp_path / "o2")
    assert err["file"].endswith("data.jsonl") and err["line"] == 7 and err["stage"] == "serialize"
    assert why in err["error"]


def test_jsonl_writes_tensors_decimal_dates_as_tagged_objects_read_back_typed(
    tmp_path: Path, inp: Path
) -> None:
    import datetime
    import decimal

    from torchx_datapipes.data import OutputDataset

    m = run_op("transform", str(inp), tmp_path / "o", fn=_mixed)
    assert m["bad"] == 0
    first = json.loads((tmp_path / "o/part-00000.jsonl").read_text().splitlines()[0])
    assert first == {
        "id": 0,
        "t": {"__tdp__": "tensor", "dtype": "int64", "shape": [2, 2], "data": [0, 2, 1, 3]},
        "h": {"__tdp__": "tensor", "dtype": "float16", "shape": [2], "data": [0.5, 0.5]},
        "d": {"__tdp__": "decimal", "value": "1.10"},
        "day": {"__tdp__": "date", "value": "2024-02-29"},
        "ts": {"__tdp__": "datetime", "value": "2024-02-29T12:30:00"},
        "n": 3,
    }
    back = next(iter(OutputDataset(str(tmp_path / "o"))))
    assert back["t"].dtype == torch.int64 and back["t"].tolist() == [[0, 2], [1, 3]]
    assert back["h"].dtype == torch.float16 and back["h"].tolist() == [0.5, 0.5]
    assert back["d"] == decimal.Decimal("1.10") and str(back["d"]) == "1.10"
    assert back["day"] == datetime.date(2024, 2, 29) and back["ts"] == datetime.datetime(2024, 2, 29, 12, 30)
    assert back["n"] == 3 and type(back["n"]) is int


def test_jsonl_refuses_a_dict_holding_the_reserved_tag_key(tmp_path: Path, inp: Path) -> None:
    m = run_op(
        "transform", str(inp), tmp_path / "o", "--on_error", "skip", "--max_error_rate", "1",
        fn=_reserved,
    )  # fmt: skip
    (err,) = _errors(tmp_path / "o")
    assert err["line"] == BAD_ID + 1 and "field meta.x: a dict with the key '__tdp__'" in err["error"], err
    assert m["records_out"] == 9


def _reserved(r: Dict[str, Any]) -> Dict[str, Any]:
    x = {"__tdp__": "decimal", "value": "1"} if r["id"] == BAD_ID else {"k": 1}
    return {"id": r["id"], "meta": {"x": x}}


def _mixed(r: Dict[str, Any]) -> Dict[str, Any]:
    import datetime
    import decimal

    return {
        "id": r["id"],
        "t": torch.arange(4).reshape(2, 2).T,  # non-contiguous
        "h": np.full(2, 0.5, dtype=np.float16),
        "d": decimal.Decimal("1.10"),
        "day": datetime.date(2024, 2, 29),
        "ts": datetime.datetime(2024, 2, 29, 12, 30),
        "n": np.int8(3),
    }


def _conflict(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": r["id"], "v": {"nested": 1} if r["id"] == BAD_ID else r["id"]}


def test_parquet_type_conflict_in_a_batch_is_the_bad_record(tmp_path: Path, inp: Path) -> None:
    m = run_op(
        "transform", str(inp), tmp_path / "o", "--output_format", "parquet", "--on_error", "skip",
        "--max_error_rate", "1", fn=_conflict,
    )  # fmt: skip
    (err,) = _errors(tmp_path / "o")
    assert err["line"] == 7 and "field v" in err["error"] and m["records_out"] == 9
    import pyarrow.parquet as pq

    part = pq.ParquetFile(tmp_path / "o/part-00000.parquet")
    assert part.num_row_groups == 1 and part.metadata.num_rows == 9  # no row group per retried record


def test_split_skips_a_record_its_writer_refuses(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in/s.jsonl", [{"id": i, "k": {"x": 1} if i == 4 else i} for i in range(12)])
    m = run_op(
        "split", str(inp), tmp_path / "o", "--fractions", "a=0.5,b=0.5", "--key", "id",
        "--output_format", "parquet", "--on_error", "skip", "--max_error_rate", "1",
    )  # fmt: skip
    (err,) = _errors(tmp_path / "o")
    assert err["line"] == 5 and err["stage"] == "serialize" and "field k" in err["error"]
    assert m["records_out"] == 11
