"""``collate``: the README's DataLoader recipe on a real-shaped table with missing values."""

import math
import pickle
from pathlib import Path
from typing import Any, Dict, List

import pytest
import torch
from tdp_testutil import run_op, write_jsonl
from torch.utils.data import DataLoader

from torchx_datapipes.data import Collate, CollateError, OutputDataset, collate, present

ROWS: List[Dict[str, Any]] = [
    {
        "id": i,
        "age": None if i % 3 == 0 else 20.5 + i,
        "n": None if i % 4 == 1 else i,
        "name": None if i == 2 else f"p{i}",
    }
    for i in range(10)
]


def ident(r: Dict[str, Any]) -> Dict[str, Any]:
    return r


def priced(r: Dict[str, Any]) -> Dict[str, Any]:
    from decimal import Decimal

    return {**r, "price": None if r["price"] is None else Decimal(r["price"])}


@pytest.fixture(scope="module")
def table(tmp_path_factory: Any) -> Dict[str, str]:
    root: Path = tmp_path_factory.mktemp("collate")
    write_jsonl(root / "in" / "t.jsonl", ROWS)
    outs = {}
    for fmt in ("jsonl", "parquet"):
        out = root / f"out-{fmt}"
        run_op("transform", str(root / "in"), out, "--output_format", fmt, fn=ident)
        outs[fmt] = str(out)
    return outs


def test_default_collate_fails_on_missing_values_naming_no_field(table: Dict[str, str]) -> None:
    with pytest.raises(TypeError) as e:
        list(DataLoader(OutputDataset(table["parquet"]), batch_size=4))
    assert "age" not in str(e.value)  # why this module exists


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("workers", [0, 2])
def test_readme_recipe_masks_missing_values(table: Dict[str, str], fmt: str, workers: int) -> None:
    ds = OutputDataset(table[fmt])
    batches = list(DataLoader(ds, batch_size=4, num_workers=workers, collate_fn=collate))
    ids = torch.cat([b["id"] for b in batches]).tolist()
    assert sorted(ids) == list(range(10))
    by_id: Dict[int, Dict[str, Any]] = {}
    for b in batches:
        known, n_known = present(b, "age"), present(b, "n")
        assert known.dtype == torch.bool
        if known.any():  # a batch where every age is missing has its list of None (type unknown)
            assert b["age"].dtype == torch.float64
        for k, i in enumerate(b["id"].tolist()):
            by_id[i] = {
                "age": b["age"][k].item() if known[k] else None,
                "n": b["n"][k].item() if n_known[k] else None,
                "name": b["name"][k],
                "nan_fill": math.isnan(b["age"][k].item()) if known.any() and not known[k] else None,
            }
    for r in ROWS:
        got = by_id[r["id"]]
        assert (got["age"], got["n"], got["name"]) == (r["age"], r["n"], r["name"])
        assert got["nan_fill"] in (None, True)


def test_fill_values_and_strict_mode_name_the_field() -> None:
    batch = [{"a": 1.0, "s": "x"}, {"a": None, "s": None}]
    out = Collate(null={"a": -1.0})(batch)
    assert out["a"].tolist() == [1.0, -1.0] and "__mask__" not in out and out["s"] == ["x", None]
    with pytest.raises(CollateError) as e:
        Collate(mask=False)(batch)
    assert "field 'a'" in str(e.value) and "null=" in str(e.value) and "1 of 2" in str(e.value)
    tensors = [{"t": torch.ones(2, 3, dtype=torch.int16)}, {}]
    out = collate(tensors)
    assert (
        out["t"].shape == (2, 2, 3)
        and out["t"][1].eq(0).all()
        and out["__mask__"]["t"].tolist() == [True, False]
    )
    assert pickle.loads(pickle.dumps(Collate(null={"a": 0}))) == Collate(null={"a": 0})


def test_a_typed_csv_with_dates_decimals_and_missing_values_collates(tmp_path: Path) -> None:
    """A real table's non-numeric types (a ``--schema`` date, a Decimal) stay lists, None kept."""
    import datetime
    from decimal import Decimal

    (tmp_path / "t.csv").write_text(
        'id,name,joined,price\n1,"Smith, John",2020/01/03,1.50\n2,"Doe, Jane",NA,2.25\n'
        "3,Bob,2019/12/31,\n4,Eve,2022/07/15,3.00\n"
    )
    out = tmp_path / "out"
    schema = "joined:date[%Y/%m/%d],price:string"
    run_op("transform", str(tmp_path / "t.csv"), out, "--schema", schema, "--output_format", "parquet",
           fn=priced)  # fmt: skip
    (b,) = list(DataLoader(OutputDataset(str(out)), batch_size=8, collate_fn=collate))
    assert b["id"].tolist() == [1, 2, 3, 4] and b["name"][0] == "Smith, John"
    d = datetime.date
    assert b["joined"] == [d(2020, 1, 3), None, d(2019, 12, 31), d(2022, 7, 15)]
    assert b["price"] == [Decimal("1.50"), Decimal("2.25"), None, Decimal("3.00")]
    assert present(b, "joined").tolist() == [True, False, True, True]  # from the list's None
    first = next(iter(DataLoader(OutputDataset(str(out)), batch_size=1, collate_fn=collate)))
    assert first["joined"] == [datetime.date(2020, 1, 3)]  # nothing missing: still a list
