"""The images benchmark's harness (issue 10), at a tiny size: every method runs and its output checks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_images  # noqa: E402

pytestmark = pytest.mark.e2e


def test_images_are_deterministic_mixed_sizes_and_not_flat(tmp_path: Path) -> None:
    import io

    from PIL import Image

    a = bench_images.make_jpeg(3, seed=0)
    assert a == bench_images.make_jpeg(3, seed=0) and a != bench_images.make_jpeg(4, seed=0)
    sizes = set()
    for i in range(6):
        with Image.open(io.BytesIO(bench_images.make_jpeg(i, seed=0))) as im:
            assert 100 <= min(im.size) and max(im.size) <= 800 and im.format == "JPEG"
            sizes.add(im.size)
            lo, hi = zip(*im.getextrema())
            assert max(hi) - min(lo) > 100  # not a flat colour
    assert len(sizes) == 6


def test_tiny_run_checks_every_method(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(REPO / "benchmarks/bench_images.py"), "--n", "6", "--check", "2"]
    cmd += ["--methods", "ours,ours-wds,pool2,litdata", "--j", "1x1"]  # one rank: the harness is under test
    cmd += ["--workdir", str(tmp_path / "w"), "--json", str(out)]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"ours", "ours-wds", "pool2", "litdata"}
    for r in rows.values():
        assert r["ok"] and r["note"].startswith("checked: 6 records, 2 tensors equal"), r
        if r["method"].startswith("ours"):  # the job's timeline, from the manifest
            x = r["extra"]
            assert "start " in r["note"] and x["last_slot_end_s"] >= x["first_unit_s"] > 0, r
        assert r["wall_s"] > 0 and r["work_s"] > 0 and r["cpu_s"] > 0
    for method in ("ours", "ours-wds"):
        assert f"{method}: steady state vs pool2:" in res.stdout, res.stdout
        assert f"{method}: end to end vs litdata:" in res.stdout, res.stdout
