"""Parquet output: one schema for the whole job, the same for any number of workers."""

import json
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest
from tdp_testutil import part_bytes, run_op, write_jsonl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")


def typed(r: Dict[str, Any]) -> Dict[str, Any]:
    """Keeps the drifting JSON fields; adds numpy widths and a tensor whose shape differs by file."""
    out = dict(r)
    out["i8"] = np.int8(r["id"] % 100)
    out["f32"] = np.float32(r["id"] / 2)
    out["vec"] = np.full(2 if r["id"] < 100 else 3, r["id"], dtype=np.float32)
    return out


@pytest.fixture
def drifting(tmp_path: Path) -> Path:
    d = tmp_path / "in"
    # a.jsonl: v is int, s is always null, w appears only after the first record
    write_jsonl(
        d / "a.jsonl",
        [{"id": 0, "v": 1, "s": None}, *({"id": i, "v": i, "s": None, "w": "x"} for i in range(1, 5))],
    )
    # b.jsonl: v is float, s is a string
    write_jsonl(d / "b.jsonl", [{"id": 100 + i, "v": i + 0.5, "s": f"s{i}"} for i in range(4)])
    return d


def _job(d: Path, out: Path, workers: int) -> Dict[str, Any]:
    return run_op(
        "transform", str(d), out, "--output_format", "parquet", "--num_workers", str(workers), fn=typed
    )


def test_drifting_types_give_one_table_for_1_and_2_workers(tmp_path: Path, drifting: Path) -> None:
    m1 = _job(drifting, tmp_path / "o1", 1)
    m2 = _job(drifting, tmp_path / "o2", 2)
    b1, b2 = part_bytes(tmp_path / "o1"), part_bytes(tmp_path / "o2")
    assert list(b1) == ["part-00000.parquet", "part-00001.parquet"] and b1 == b2
    assert m1["parquet_schema"] == m2["parquet_schema"]
    assert all("schemas" not in u for u in m1["units"])  # kept in the commit records, not the manifest
    schemas = [pq.read_schema(p) for p in sorted((tmp_path / "o1").glob("part-*.parquet"))]
    assert schemas[0].equals(schemas[1])
    table = ds.dataset(str(tmp_path / "o1"), format="parquet").to_table()
    assert table.num_rows == 9
    types = {f.name: f.type for f in table.schema}
    assert types["v"] == pa.float64() and types["s"] == pa.string() and types["w"] == pa.string()
    assert types["i8"] == pa.int8() and types["f32"] == pa.float32()  # widths kept
    rows = {r["id"]: r for r in table.to_pylist()}
    assert rows[0]["w"] is None and rows[1]["w"] == "x"  # a field missing from the first record is kept
    assert rows[2]["v"] == 2.0 and rows[101]["v"] == 1.5 and rows[101]["s"] == "s1"
    # vec has shape (2,) in one file and (3,) in the other: the variable layout, values kept
    from torchx_datapipes.formats.parquet.arrow import column_to_numpy, is_variable_tensor

    assert is_variable_tensor(types["vec"])
    vecs = column_to_numpy(table.column("vec"))
    ids = table.column("id").to_pylist()
    for i, v in zip(ids, vecs):
        assert v.dtype == np.float32 and v.shape == ((2,) if i < 100 else (3,)) and (v == i).all()
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "o1")
    assert len(frame) == 9 and str(frame["i8"].dtype) == "int8"


def test_rewritten_parts_keep_their_commit_records_valid(
    tmp_path: Path, drifting: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    m = _job(drifting, out, 1)
    assert m["parquet_schema"]["rewritten_parts"] >= 1
    before = part_bytes(out)
    (out / "_SUCCESS").unlink()
    capfd.readouterr()
    _job(drifting, out, 1)  # resume: every unit is still committed (its record matches the rewritten part)
    err = capfd.readouterr().err
    assert "resumed: skipped 2 committed unit(s)" in err and "redoing" not in err
    assert part_bytes(out) == before
    metas = [json.loads(p.read_text()) for p in sorted((out / "_units").glob("*"))]
    assert all(len(set(mm["schemas"].values())) == 1 for mm in metas)


def test_other_readers_see_one_table(tmp_path: Path, drifting: Path) -> None:
    _job(drifting, tmp_path / "o", 2)
    import duckdb
    import polars as pl

    n = duckdb.sql(
        f"select count(*), count(w) from read_parquet('{tmp_path / 'o'}/part-*.parquet')"
    ).fetchall()
    assert n == [(9, 4)]
    frame = pl.read_parquet(str(tmp_path / "o" / "part-*.parquet"))
    assert frame.height == 9 and frame["w"].null_count() == 5


def test_hf_datasets_loads_the_output(tmp_path: Path, drifting: Path) -> None:
    import datasets

    _job(drifting, tmp_path / "o", 1)
    files = sorted(str(p) for p in (tmp_path / "o").glob("part-*.parquet"))
    d = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    assert d.num_rows == 9 and set(d.column_names) >= {"id", "v", "s", "w"}


def test_split_parquet_parts_share_one_schema(tmp_path: Path, drifting: Path) -> None:
    out = tmp_path / "o"
    run_op("split", str(drifting), out, "--fractions", "train=0.5,val=0.5", "--output_format", "parquet")
    parts = sorted(out.glob("*/part-*.parquet"))
    assert len(parts) == 4
    schemas = [pq.read_schema(p) for p in parts]
    assert all(s.equals(schemas[0]) for s in schemas)
    assert ds.dataset([str(p) for p in parts], format="parquet").to_table().num_rows == 9


def _drop_b(r: Dict[str, Any]) -> Any:
    return r if r["id"] < 100 else None  # b.jsonl's part is empty


def test_an_empty_part_gets_the_job_schema(tmp_path: Path, drifting: Path) -> None:
    out = tmp_path / "o"
    run_op("transform", str(drifting), out, "--output_format", "parquet", fn=_drop_b)
    a, b = (pq.read_table(out / f"part-0000{k}.parquet") for k in (0, 1))
    assert b.num_rows == 0 and a.schema.equals(b.schema) and "w" in b.schema.names
    assert ds.dataset(str(out), format="parquet").to_table().num_rows == 5


def _struct_in_b(r: Dict[str, Any]) -> Any:
    return {"id": r["id"], "v": {"x": 1} if r["id"] >= 100 else 1}


def test_types_arrow_cannot_widen_across_parts_stop_the_commit(tmp_path: Path, drifting: Path) -> None:
    from torchx_datapipes.errors import DatapipesError

    with pytest.raises(
        DatapipesError, match=r"cannot share one schema: field v: int64 in some records, struct"
    ):
        run_op("transform", str(drifting), tmp_path / "o", "--output_format", "parquet", fn=_struct_in_b)
    assert not (tmp_path / "o/_SUCCESS").exists()


def test_arrow_widening_rules() -> None:
    from torchx_datapipes.formats.parquet.arrow import unify

    s = unify(
        [pa.schema([("a", pa.int8()), ("b", pa.null())]), pa.schema([("a", pa.int16()), ("b", pa.string())])]
    )
    assert s.field("a").type == pa.int16() and s.field("b").type == pa.string()


def _late_drift(r: Dict[str, Any]) -> Dict[str, Any]:
    i = r["id"]
    return {"id": i, "v": i + 0.5 if i >= 6 else i, **({"late": str(i)} if i == 9 else {})}


@pytest.mark.parametrize("drift", [True, False])
def test_row_groups_flushed_before_a_type_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], drift: bool
) -> None:
    from torchx_datapipes.formats.parquet import writer as parquet

    inp = write_jsonl(tmp_path / "in/a.jsonl", [{"id": i} for i in range(10)])
    fn = _late_drift if drift else typed
    args = ("--output_format", "parquet", "--batch_size", "2")
    run_op("transform", str(inp), tmp_path / "whole", *args, fn=fn)
    monkeypatch.setattr(parquet, "FLUSH_BYTES", 1)  # a row group per batch
    out = tmp_path / "flushed"
    run_op("transform", str(inp), out, *args, fn=fn)
    whole, flushed = (
        pq.read_table(tmp_path / "whole/part-00000.parquet"),
        pq.read_table(out / "part-00000.parquet"),
    )
    assert flushed.schema.equals(whole.schema) and flushed.to_pylist() == whole.to_pylist()
    if drift:
        assert flushed.schema.field("v").type == pa.float64() and flushed.column("late").null_count == 9
    else:
        assert pq.ParquetFile(out / "part-00000.parquet").num_row_groups == 5
    assert not list(out.rglob(".tmp-*"))
    (out / "_SUCCESS").unlink()
    capfd.readouterr()
    run_op("transform", str(inp), out, *args, fn=fn)
    assert "resumed: skipped 1 committed unit(s)" in capfd.readouterr().err


def test_a_value_the_widened_type_cannot_hold_names_part_and_field(tmp_path: Path) -> None:
    from torchx_datapipes.errors import DatapipesError
    from torchx_datapipes.formats.writing import PartWriter

    w = PartWriter(str(tmp_path / "part-00000.parquet"), "parquet")
    assert w.write([{"a": 1}]) == [] and w.write([{"a": np.uint64(2**64 - 1)}]) == []
    with pytest.raises(DatapipesError, match=r"part-00000\.parquet: .*field a: cannot cast uint64 to int64"):
        w.commit()
    assert not list(tmp_path.iterdir())
