"""The default shuffle window: about 32 MB of stored parts, 1024..16384 records."""

from pathlib import Path

import numpy as np
from data_testutil import ids, make_input
from tdp_testutil import run_op

from torchx_datapipes.data import OutputDataset
from torchx_datapipes.data._args import WINDOW_BYTES, auto_window


def test_auto_window_is_bounded_and_follows_record_size() -> None:
    assert auto_window(200_000 * 2_000, 200_000) == 16384  # token rows: capped
    assert auto_window(50_000 * 12_288, 50_000) == WINDOW_BYTES // 12_288  # images: ~2.7k
    assert auto_window(1_000 * 10_000_000, 1_000) == 1024  # huge records: floor
    assert auto_window(0, 0) == 16384


def big(r: dict) -> dict:
    return {"id": r["id"], "blob": np.random.default_rng(r["id"]).integers(0, 256, 40_000, dtype=np.uint8)}


def test_default_window_comes_from_the_manifest_and_an_explicit_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_op("transform", make_input(tmp_path, [400, 400]), out, "--output_format", "parquet", fn=big)
    ds = OutputDataset(str(out), shuffle=True, seed=1)
    size = sum(p.stat().st_size for p in out.glob("part-*.parquet"))
    assert ds.shuffle_window == auto_window(size, 800) < 16384
    assert ds.state_dict()["shuffle_window"] == ds.shuffle_window
    assert sorted(ids(list(ds))) == list(range(800))
    assert OutputDataset(str(out), shuffle=True, shuffle_window=5000).shuffle_window == 5000


def test_distinct_is_np_unique_without_importing_numpy_ma() -> None:
    import subprocess
    import sys

    from torchx_datapipes.data._order import distinct

    for a in [
        np.array([3, 1, 3, 2, 2]),
        np.array([], dtype=np.int64),
        np.array([5]),
        np.array([[1, 1], [0, 7]]),
    ]:
        assert distinct(a) == np.unique(a).tolist()
    code = (
        "import sys, numpy as np; from torchx_datapipes.data._order import distinct;"
        " distinct(np.array([2, 1, 2])); print('numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
