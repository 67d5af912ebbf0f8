"""HF datasets reads a Parquet output with tensor columns given ``hf_features(OUT)``."""

from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest
from data_testutil import make_input
from tdp_testutil import run_op

from torchx_datapipes.data import hf_features


def tensors(r: Dict[str, Any]) -> Dict[str, Any]:
    i = r["id"]
    return {
        "id": i,
        "img": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
        "mask": np.array([i % 2 == 0, True, False, i % 3 == 0]),
        "text": r["text"],
    }


def test_load_dataset_with_hf_features_reads_tensor_columns(tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "out"
    run_op("transform", make_input(tmp_path, [7, 5]), out, "--output_format", "parquet", fn=tensors)
    feats = hf_features(str(out))
    files = sorted(str(p) for p in out.glob("part-*.parquet"))
    d = datasets.load_dataset(
        "parquet", data_files=files, split="train", features=feats, cache_dir=str(tmp_path / "hf")
    )
    assert d.num_rows == 12
    rows = sorted(d.with_format("numpy"), key=lambda r: int(r["id"]))
    for i, row in enumerate(rows):
        assert np.array_equal(np.asarray(row["img"]).reshape(2, 3), np.arange(6).reshape(2, 3) + i)
        assert list(np.asarray(row["mask"])) == [i % 2 == 0, True, False, i % 3 == 0]


def test_hf_features_refuses_other_formats(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_op("transform", make_input(tmp_path, [3]), out, fn=tensors)
    with pytest.raises(ValueError, match="jsonl output: hf_features describes Parquet outputs only"):
        hf_features(str(out))
