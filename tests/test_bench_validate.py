"""The validate benchmark's harness (issue 22) at a tiny size: it runs, checks, and reports honestly."""

import csv
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_validate  # noqa: E402
from _common import BenchRow  # noqa: E402

pytestmark = pytest.mark.e2e


def test_tables_are_deterministic_and_shifted(tmp_path: Path) -> None:
    bench_validate.make_table(tmp_path / "a.csv", 1200, seed=1, shift=0.0)
    bench_validate.make_table(tmp_path / "b.csv", 1200, seed=1, shift=0.0)
    bench_validate.make_table(tmp_path / "c.csv", 1200, seed=2, shift=0.5)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    with open(tmp_path / "a.csv") as f:
        a = list(csv.DictReader(f))
    with open(tmp_path / "c.csv") as f:
        c = list(csv.DictReader(f))
    assert len(a) == len(c) == 1200 and list(a[0]) == ["id", "species", "island", "bill_length_mm",
                                                       "body_mass_g", "year", "sex"]  # fmt: skip
    mean = lambda rows: sum(float(r["bill_length_mm"]) for r in rows) / len(rows)  # noqa: E731
    assert mean(c) - mean(a) > 1.0


def test_crossover_is_where_the_floor_is_paid_back() -> None:
    ours = BenchRow("ours", "", 1000, wall_s=12.0)  # 10 s of floor + 2 ms per row
    ref = BenchRow("ref", "", 1000, wall_s=4.0)  # 4 ms per row
    assert bench_validate.crossover(ours, 10.0, ref) == pytest.approx(5000)
    slow = BenchRow("ours", "", 1000, wall_s=30.0)  # 10 s of floor + 20 ms per row
    assert bench_validate.crossover(slow, 10.0, ref) is None  # never: the reference is cheaper per row


def test_tiny_run_of_the_harness(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    rc = bench_validate.main(["--rows", "3000", "--json", str(out), "--ref-python", "none", "--j", "1x1",
                              "--workdir", str(tmp_path / "w")])  # fmt: skip
    payload = json.loads(out.read_text())
    assert rc == 0 and payload["launch_floor_s"] > 0
    size = payload["sizes"][0]
    rows = {r["method"]: r for r in size["rows_table"]}
    assert rows["validate"]["ok"] and rows["stats"]["ok"] and rows["ours-e2e"]["ok"]
    assert (
        rows["validate"]["records_out"] == 3000
        and "bill_length_mm:drift" in rows["validate"]["extra"]["anomalies"]
    )
    assert size["check_overhead"] is not None and size["check_overhead"] > -0.9
