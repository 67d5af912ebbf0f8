"""Issue 32, item 3: a batch where every value of a float column is missing collates to the same
type as a partly missing one (a float tensor of NaN with a mask, all False), when the column's type
is known (``Collate.for_output``: the Parquet output's schema; ``Collate(dtypes=...)``)."""

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
    for fmt in ("jsonl", "parquet"):
        out = root / f"out-{fmt}"
        run_op("transform", str(root / "in"), out, "--output_format", fmt, fn=typed)
        outs[fmt] = str(out)
    return outs


@pytest.mark.parametrize("workers", [0, 2])
def test_an_all_null_batch_of_a_float_column_is_a_nan_tensor_with_an_all_false_mask(
    outputs: Dict[str, str], workers: int
) -> None:
    url = outputs["parquet"]
    fn = Collate.for_output(url)
    batches = list(DataLoader(OutputDataset(url), batch_size=4, num_workers=workers, collate_fn=fn))
    (first,) = [b for b in batches if b["id"].tolist() == [0, 1, 2, 3]]  # every age/n/ok/w missing
    for b in batches:  # the same type for every batch
        assert b["age"].dtype == torch.float64 and b["n"].dtype == torch.int64
        assert b["ok"].dtype == torch.bool and b["w"].dtype == torch.float32
        for k, i in enumerate(b["id"].tolist()):  # NaN exactly where the mask is False
            age = ROWS[i]["age"]
            assert bool(present(b, "age")[k]) == (age is not None)
            got = b["age"][k].item()
            assert math.isnan(got) if age is None else got == age
    assert torch.isnan(first["age"]).all() and not present(first, "age").any()
    assert first["n"].tolist() == [0] * 4 and not present(first, "n").any()
    assert not present(first, "ok").any() and torch.isnan(first["w"]).all()
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
    assert Collate.for_output(outputs["jsonl"]).dtypes == {}  # JSON Lines carries no column types
    b = collate(recs)
    assert b["age"] == [None] * 4 and not present(b, "age").any()  # unknown type: documented
    b = Collate(dtypes={"age": torch.float64})(recs)
    assert b["age"].dtype == torch.float64 and torch.isnan(b["age"]).all() and not present(b, "age").any()
