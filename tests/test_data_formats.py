"""Every output format read back by OutputDataset: values, dtypes and shapes as written."""

import warnings
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest
import torch
from data_testutil import split_output, transform_output
from tdp_testutil import run_op, write_jsonl
from torch.utils.data import DataLoader

from torchx_datapipes.data import OutputDataset

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bool"]
N = 9


def _value(i: int, dtype: str, shape: tuple) -> np.ndarray:
    base = (np.arange(int(np.prod(shape)) if shape else 1) * 7 + i * 3) % 11
    return (base % 2 == 1 if dtype == "bool" else base.astype(dtype)).reshape(shape)


def tensors(r: Dict[str, Any]) -> Dict[str, Any]:
    i = int(r["id"])
    rec: Dict[str, Any] = {
        "id": i,
        "name": f"r{i}",
        "blob": bytes([i, 0, 255]),
        "maybe": None if i % 2 else i,
    }
    for d in DTYPES:
        rec[f"t_{d}"] = torch.from_numpy(_value(i, d, (2, 3)))
        rec[f"v_{d}"] = _value(i, d, (i % 3 + 1, 2))  # a shape per record
        rec[f"s_{d}"] = _value(i, d, ())  # 0-d
    rec["img"] = _value(i, "uint8", (3, 4, 4))
    return rec


@pytest.fixture(scope="module")
def inp(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("f")
    write_jsonl(root / "in/a.jsonl", [{"id": i} for i in range(5)])
    write_jsonl(root / "in/b.jsonl", [{"id": i} for i in range(5, N)])
    return str(root / "in")


def test_parquet_tensors_dtype_shape_values_without_warnings(tmp_path: Path, inp: str) -> None:
    run_op("transform", inp, tmp_path / "o", "--output_format", "parquet", fn=tensors)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch.from_numpy of a read-only Arrow buffer
        recs = list(OutputDataset(str(tmp_path / "o")))
    assert [r["id"] for r in recs] == list(range(N))
    for r in recs:
        i = r["id"]
        assert (r["name"], r["blob"], r["maybe"]) == (f"r{i}", bytes([i, 0, 255]), None if i % 2 else i)
        for d in DTYPES:
            for prefix, shape in (("t", (2, 3)), ("v", (i % 3 + 1, 2))):
                t = r[f"{prefix}_{d}"]
                assert isinstance(t, torch.Tensor) and t.dtype == getattr(torch, d) and t.shape == shape
                assert np.array_equal(t.numpy(), _value(i, d, shape))
            scalar = r[f"s_{d}"]  # 0-d columns: 0-d tensors again (the field's metadata says so)
            assert isinstance(scalar, torch.Tensor) and scalar.dtype == getattr(torch, d)
            assert scalar.shape == () and scalar.item() == _value(i, d, ()).item()
        assert r["img"].dtype == torch.uint8 and r["img"].shape == (3, 4, 4)
        r["img"] += 1  # writable (zero-copy from this read's own Arrow buffer): the next read is unchanged
    again = list(OutputDataset(str(tmp_path / "o")))[0]["img"]
    assert np.array_equal(again.numpy(), _value(0, "uint8", (3, 4, 4)))


def test_parquet_collates_and_projects_columns(tmp_path: Path, inp: str) -> None:
    run_op("transform", inp, tmp_path / "o", "--output_format", "parquet", fn=tensors)
    ds = OutputDataset(str(tmp_path / "o"), columns=["id", "img", "t_bool"])
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert set(batch) == {"id", "img", "t_bool"}
    assert batch["img"].shape == (4, 3, 4, 4) and batch["t_bool"].dtype == torch.bool
    assert batch["id"].tolist() == [0, 1, 2, 3]


def test_webdataset_members_decode_to_tensors_json_text_bytes(tmp_path: Path, inp: str) -> None:
    def rec(r: Dict[str, Any]) -> Dict[str, Any]:
        i = int(r["id"])
        return {
            "__key__": f"k{i:03d}",
            "img": _value(i, "uint8", (3, 4, 4)),
            "mask.npy": _value(i, "bool", (2, 2)),
            "meta": {"i": i, "tags": ["a", "b"]},
            "txt": f"caption {i}",
            "cls": i % 4,
            "png": bytes([i, 1, 2]),
        }

    run_op("transform", inp, tmp_path / "o", "--output_format", "webdataset", fn=rec)
    recs = list(OutputDataset(str(tmp_path / "o")))
    assert [r["__key__"] for r in recs] == [f"k{i:03d}" for i in range(N)]
    for i, r in enumerate(recs):
        assert r["img"].dtype == torch.uint8 and np.array_equal(
            r["img"].numpy(), _value(i, "uint8", (3, 4, 4))
        )
        assert r["mask"].dtype == torch.bool and r["mask"].shape == (2, 2)
        assert r["meta"] == {"i": i, "tags": ["a", "b"]}
        assert (r["txt"], r["cls"], r["png"]) == (f"caption {i}", i % 4, bytes([i, 1, 2]))
    only = list(OutputDataset(str(tmp_path / "o"), columns=["cls"]))
    assert only[5] == {"__key__": "k005", "cls": 1}


def test_jsonl_records_as_written(tmp_path: Path) -> None:
    out = transform_output(tmp_path, [4100, 3], "jsonl")  # part 0: two chunks of its own
    recs = list(OutputDataset(out, read_ahead=0))
    assert [r["id"] for r in recs] == list(range(4103))
    assert recs[4099] == {"id": 4099, "text": recs[4099]["text"], "x": 2049.5, "label": 1}
    assert list(OutputDataset(out, columns=["x"]))[3] == {"x": 1.5}


def test_split_webdataset_and_parquet_read_one_split(tmp_path: Path) -> None:
    for fmt in ("webdataset", "parquet"):
        out = split_output(tmp_path / fmt, [20, 13], fmt)
        got = sorted(int(r["id"]) for s in ("train", "val") for r in OutputDataset(out, s))
        assert got == list(range(33)), fmt
