"""Tensors and arrays out through Parquet and WebDataset, read back with pyarrow and webdataset."""

from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.formats.parquet.arrow import column_to_numpy

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bool"]
SHAPES: List[tuple] = [(), (3,), (2, 3), (2, 1, 3), (2, 1, 2, 3)]
N = 6


def _value(i: int, dtype: str, shape: tuple) -> np.ndarray:
    size = int(np.prod(shape)) if shape else 1
    base = (np.arange(size) * 7 + i * 3) % 11 - (0 if dtype.startswith("u") or dtype == "bool" else 5)
    return (base % 2 == 1 if dtype == "bool" else base.astype(dtype)).reshape(shape)


def expected(i: int) -> Dict[str, np.ndarray]:
    out: Dict[str, np.ndarray] = {}
    for d in DTYPES:
        for s in SHAPES:
            out[f"np_{d}_{len(s)}d"] = _value(i, d, s)
            out[f"pt_{d}_{len(s)}d"] = _value(i, d, s)
        out[f"nc_{d}"] = _value(i, d, (3, 4)).T  # non-contiguous (transposed) 4x3
        out[f"var_{d}"] = _value(i, d, (i + 1, 2))  # a shape per record
    return out


def tensors(r: Dict[str, Any]) -> Dict[str, Any]:
    i = int(r["id"])
    rec: Dict[str, Any] = {"id": i}
    for name, v in expected(i).items():
        if name.startswith("pt_"):
            rec[name] = torch.from_numpy(v.copy())
        elif name.startswith("nc_"):
            rec[name] = torch.from_numpy(v.T.copy()).T if i % 2 else v  # torch and numpy views
        else:
            rec[name] = v
    rec["blob"] = bytes([i, 0, 255])
    return rec


@pytest.fixture
def inp(tmp_path: Path) -> str:
    return str(write_jsonl(tmp_path / "in/a.jsonl", [{"id": i} for i in range(N)]))


def test_parquet_round_trip_keeps_dtype_shape_values(tmp_path: Path, inp: str) -> None:
    import pyarrow as pa
    import pyarrow.dataset as ds

    out = tmp_path / "o"
    run_op("transform", inp, out, "--output_format", "parquet", fn=tensors)
    table = ds.dataset(str(out), format="parquet").to_table()
    assert table.column("id").to_pylist() == list(range(N))
    assert table.column("blob").to_pylist() == [bytes([i, 0, 255]) for i in range(N)]
    for name in expected(0):
        col = table.column(name)
        if name.startswith("var_"):
            got = column_to_numpy(col)
            for i in range(N):
                want = expected(i)[name]
                assert got[i].dtype == want.dtype and got[i].shape == want.shape, name
                np.testing.assert_array_equal(got[i], want)
            continue
        want = np.stack([expected(i)[name] for i in range(N)])
        got = column_to_numpy(col)
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        np.testing.assert_array_equal(got, want)
        if want.ndim > 1:
            assert isinstance(col.type, pa.FixedShapeTensorType), name
            if want.dtype != np.bool_:  # Arrow tensors have no bool; column_to_numpy unpacks it
                np.testing.assert_array_equal(col.combine_chunks().to_numpy_ndarray(), want)
                t = torch.from_numpy(got)  # zero-copy into torch
                assert t.dtype == torch.from_numpy(want).dtype and tuple(t.shape) == want.shape


def test_webdataset_round_trip_keeps_dtype_shape_values(tmp_path: Path, inp: str) -> None:
    wds = pytest.importorskip("webdataset")
    out = tmp_path / "o"
    m = run_op("transform", inp, out, "--output_format", "webdataset", fn=tensors)
    assert m["records_out"] == N
    (shard,) = sorted(out.glob("part-*.tar"))
    assert shard.name == "part-00000.tar"
    samples = list(wds.WebDataset(str(shard), shardshuffle=False).decode())
    assert [s["__key__"] for s in samples] == [f"00000_{i:06d}" for i in range(N)]
    for i, s in enumerate(samples):
        assert s["blob"] == bytes([i, 0, 255])
        assert int(s["id"]) == i  # "id" is a text convention: <key>.id holds "3"
        for name, want in expected(i).items():
            got = s[f"{name}.npy"]
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want)


def test_webdataset_key_and_text_conventions(tmp_path: Path, inp: str) -> None:
    wds = pytest.importorskip("webdataset")
    out = tmp_path / "o"
    run_op("transform", inp, out, "--output_format", "webdataset", fn=_keyed)
    samples = list(wds.WebDataset(str(out / "part-00000.tar"), shardshuffle=False))
    assert [s["__key__"] for s in samples] == [f"sample{i}" for i in range(N)]
    assert samples[2]["cls"] == b"2" and samples[2]["txt"] == b"two"
    assert samples[2]["png"] == b"\x89PNG" and samples[2]["meta.json"] == b'{"n":2}'


def _keyed(r: Dict[str, Any]) -> Dict[str, Any]:
    i = r["id"]
    return {
        "__key__": f"sample{i}",
        "cls": i,
        "txt": ["zero", "one", "two"][i % 3],
        "png": b"\x89PNG",
        "meta": {"n": i},
    }


def test_split_writes_webdataset_shards_per_split(tmp_path: Path, inp: str) -> None:
    wds = pytest.importorskip("webdataset")
    out = tmp_path / "o"
    fmt = ("--output_format", "webdataset")
    m = run_op("split", inp, out, "--fractions", "a=0.5,b=0.5", "--key", "id", *fmt)
    shards = sorted(out.glob("*/part-*.tar"))
    assert [p.relative_to(out).as_posix() for p in shards] == ["a/part-00000.tar", "b/part-00000.tar"]
    ids = sorted(int(s["id"]) for p in shards for s in wds.WebDataset(str(p), shardshuffle=False))
    assert ids == list(range(N)) and sum(m["splits"].values()) == N


def _nested(r: Dict[str, Any]) -> Dict[str, Any]:
    i = r["id"]
    return {
        "id": i,
        "meta": {"emb": torch.arange(3, dtype=torch.int16) + i},  # a 1-d tensor inside a dict
        "img": None if i == 2 else torch.full((2, 2), i, dtype=torch.uint8),  # a null row
        "bad": {"m": torch.ones(2, 2)} if i == 4 else None,  # a 2-d tensor inside a dict
    }


def test_parquet_nested_tensors_and_null_rows(tmp_path: Path, inp: str) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "o"
    m = run_op(
        "transform", inp, out, "--output_format", "parquet", "--on_error", "skip",
        "--max_error_rate", "1", fn=_nested,
    )  # fmt: skip
    (err,) = [json.loads(x) for x in (out / "_errors/part-00000.jsonl").read_text().splitlines()]
    assert err["line"] == 5 and "field bad: value m is an array that is not 1-d" in err["error"]
    assert m["records_out"] == N - 1
    t = pq.read_table(out / "part-00000.parquet")
    assert t.schema.field("meta").type == pa.struct([("emb", pa.list_(pa.int16()))])
    assert t.column("meta").to_pylist()[1] == {"emb": [1, 2, 3]}
    img = t.column("img")
    assert img.null_count == 1 and img.is_null().to_pylist()[2]
    got = column_to_numpy(img)
    assert got.dtype == np.uint8 and got.shape == (N - 1, 2, 2) and (got[3] == 3).all()
