"""Issue 32, item 3: a batch where every value of a float column is missing collates to the same
type as a partly missing one (a float tensor of NaN with a mask, all False), when the column's type
is known (``Collate.for_output``: the Parquet output's schema, or the value types a JSON Lines or
WebDataset output's writers recorded in its manifest; ``Collate(dtypes=...)``)."""

import math
import pickle
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from tdp_testutil import run_op, write_jsonl
from torch.utils.data import DataLoader

from torchx_datapipes.data import Collate, CollateError, OutputDataset, collate, present

# ages missing in rows 0-3 (a whole first batch of 4), and here and there after
ROWS: List[Dict[str, Any]] = [
    {"id": i, "age": None if i < 4 or i == 6 else 20.5 + i, "n": None if i < 4 else i, "name": f"p{i}"}
    for i in range(10)
]


def typed(r: Dict[str, Any]) -> Dict[str, Any]:
    i = r["id"]
    return {**r, "ok": None if i < 4 else i % 2 == 0, "w": None if i < 4 else np.array(i, dtype="float32")}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: Any) -> Dict[str, str]:
    root: Path = tmp_path_factory.mktemp("round5-collate")
    write_jsonl(root / "in" / "t.jsonl", ROWS)
    outs = {}
    for fmt in ("jsonl", "parquet", "webdataset"):
        out = root / f"out-{fmt}"
        run_op("transform", str(root / "in"), out, "--output_format", fmt, fn=typed)
        outs[fmt] = str(out)
    return outs


@pytest.mark.parametrize("fmt, workers", [("parquet", 0), ("parquet", 2), ("jsonl", 2), ("webdataset", 0)])
def test_an_all_null_batch_of_a_float_column_is_a_nan_tensor_with_an_all_false_mask(
    outputs: Dict[str, str], fmt: str, workers: int
) -> None:
    url = outputs[fmt]
    fn = Collate.for_output(url)
    batches = list(DataLoader(OutputDataset(url), batch_size=4, num_workers=workers, collate_fn=fn))
    (first,) = [b for b in batches if b["id"].tolist() == [0, 1, 2, 3]]  # every age/n/ok/w missing
    for b in batches:  # the same type for every batch
        assert b["age"].dtype == torch.float64 and b["n"].dtype == torch.int64
        assert b["ok"].dtype == torch.bool
        if fmt == "parquet":  # a 0-d tensor column: Parquet keeps its dtype; JSON's tensors are not scalars
            assert b["w"].dtype == torch.float32
        for k, i in enumerate(b["id"].tolist()):  # NaN exactly where the mask is False
            age = ROWS[i]["age"]
            assert bool(present(b, "age")[k]) == (age is not None)
            got = b["age"][k].item()
            assert math.isnan(got) if age is None else got == age
    assert torch.isnan(first["age"]).all() and not present(first, "age").any()
    assert first["n"].tolist() == [0] * 4 and not present(first, "n").any()
    assert not present(first, "ok").any()
    if fmt == "parquet":
        assert torch.isnan(first["w"]).all()
    assert any(present(b, "age").any() and not present(b, "age").all() for b in batches)  # a partial one


def test_strict_mode_and_fill_values_apply_to_an_all_null_batch(outputs: Dict[str, str]) -> None:
    url = outputs["parquet"]
    recs = list(OutputDataset(url, columns=["id", "age"]))[:4]
    with pytest.raises(CollateError, match=r"field 'age': 4 of 4 values .*Collate\(null="):
        Collate.for_output(url, mask=False)(recs)
    filled = Collate.for_output(url, null={"age": -1.0}, mask=False)
    assert pickle.loads(pickle.dumps(filled))(recs)["age"].tolist() == [-1.0] * 4


def test_dtypes_by_hand_and_an_unknown_type_stays_a_list(outputs: Dict[str, str]) -> None:
    recs = list(OutputDataset(outputs["jsonl"]))[:4]
    assert Collate.for_output(outputs["jsonl"]).dtypes == {  # the types its writers recorded
        "id": torch.int64, "age": torch.float64, "n": torch.int64, "ok": torch.bool
    }  # fmt: skip
    b = collate(recs)  # plain collate knows no output
    assert b["age"] == [None] * 4 and not present(b, "age").any()  # unknown type: documented
    b = Collate(dtypes={"age": torch.float64})(recs)
    assert b["age"].dtype == torch.float64 and torch.isnan(b["age"]).all() and not present(b, "age").any()


def test_a_json_column_of_ints_and_floats_is_float64_in_every_batch(tmp_path: Path) -> None:
    """Real JSON writes 3 and 3.5 in one column: a batch of ints alone collated to int64 before."""
    rows = [{"id": i, "price": (i if i < 4 else i + 0.5) if i % 5 else None, "tag": "t"} for i in range(12)]
    write_jsonl(tmp_path / "in" / "p.jsonl", rows)
    out = tmp_path / "out"
    m = run_op("transform", str(tmp_path / "in"), out, fn=lambda r: r)
    assert m["field_types"] == {"id": ["int"], "price": ["float", "int", "null"], "tag": ["str"]}
    fn = Collate.for_output(str(out))
    batches = list(DataLoader(OutputDataset(str(out)), batch_size=4, collate_fn=fn))
    assert [b["price"].dtype for b in batches] == [torch.float64] * 3
    got = {i: (p if k else None) for b in batches for i, p, k in zip(
        b["id"].tolist(), b["price"].tolist(), present(b, "price").tolist())}  # fmt: skip
    assert got == {r["id"]: r["price"] for r in rows}


def test_field_types_are_unknown_when_a_part_holds_other_than_dicts(tmp_path: Path) -> None:
    from torchx_datapipes.formats.fieldtypes import FieldTypes, merge, scalar_kind

    t = FieldTypes()
    t.observe([{"a": 1, "b": None}, {"a": 2.5}], skip=[])
    t.observe([{"a": "bad"}], skip=[0])  # a record the writer refused does not count
    assert t.to_json() == {"a": ["float", "int"], "b": ["null"]}
    assert merge([t.to_json(), {"c": ["bool"]}]) == {"a": ["float", "int", "null"], "b": ["null"],
                                                     "c": ["bool", "null"]}  # fmt: skip
    assert [scalar_kind(x) for x in (["int", "null"], ["bool"], ["str", "int"], ["null"])] == [
        "int", "bool", None, None]  # fmt: skip
    t.observe(["not a dict"])
    assert t.to_json() is None and merge([None, {"a": ["int"]}]) is None
