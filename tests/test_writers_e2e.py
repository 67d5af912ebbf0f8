"""One real ``torchx run -j 1x2``: Parquet parts with drifting types equal those of an in-process 1x1 run."""

import textwrap
from pathlib import Path

import pytest
from tdp_testutil import manifest, part_bytes, run_op, run_torchx, write_jsonl

pytestmark = pytest.mark.e2e

FN = textwrap.dedent(
    """
    import numpy as np

    def typed(r):
        out = dict(r)
        out["i8"] = np.int8(r["id"] % 100)
        out["vec"] = np.full(2 if r["id"] < 100 else 3, r["id"], dtype=np.float32)
        return out
    """
)


def test_torchx_run_1x2_matches_in_process_1x1(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    ds = pytest.importorskip("pyarrow.dataset")
    write_jsonl(
        tmp_path / "data/a.jsonl", [{"id": 0, "v": 1}, *({"id": i, "v": i, "w": "x"} for i in range(1, 5))]
    )
    write_jsonl(tmp_path / "data/b.jsonl", [{"id": 100 + i, "v": i + 0.5, "s": f"s{i}"} for i in range(4)])
    (tmp_path / "my_fn.py").write_text(FN)
    args = [
        "run", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "my_fn.py:typed",
        "--input", "data", "--output", "out/1x2", "-j", "1x2", "--output_format", "parquet",
        "--rdzv_port", "29671",
    ]  # fmt: skip
    res = run_torchx(args, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        from my_fn import typed  # type: ignore[import-not-found]

        run_op(
            "transform", str(tmp_path / "data"), tmp_path / "out/1x1", "--output_format", "parquet", fn=typed
        )
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_fn", None)
    assert part_bytes(tmp_path / "out/1x2") == part_bytes(tmp_path / "out/1x1")
    assert manifest(tmp_path / "out/1x2")["world_size"] == 2
    assert ds.dataset(str(tmp_path / "out/1x2"), format="parquet").to_table().num_rows == 9
