"""The Parquet reader's stress loop (issue 29, item 6) at a tiny size: it runs, checks every loop,
reports the allocator the workers used, and counts a crashed worker as a crash instead of dying."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_reader_stress  # noqa: E402

pytestmark = pytest.mark.e2e

SCRIPT = str(REPO / "benchmarks/bench_reader_stress.py")


def test_tiny_run_counts_loops_and_the_allocators(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    cmd = [sys.executable, SCRIPT, "--loops", "2", "--reference-loops", "1", "--records", "600"]
    cmd += ["--parts", "3", "--batch-size", "16", "--workdir", str(tmp_path / "w"), "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"default", "jemalloc"}
    assert (rows["default"]["loops"], rows["jemalloc"]["loops"]) == (2, 1)
    assert rows["default"]["pools"] == "system" and rows["jemalloc"]["pools"] == "jemalloc"
    for r in rows.values():
        assert (r["crashes"], r["wrong"], r["other"]) == (0, 0, 0), r
        assert all(lp["verdict"] == "ok" and lp["read_s"] > 0 for lp in r["loop_details"])
    assert "| unset (the reader's default) | system | 2 | 0 | 0 | 0 |" in res.stdout


def test_a_worker_that_dies_at_exit_is_a_crash_not_the_end(tmp_path: Path) -> None:
    """The child's workers kill themselves with SIGSEGV as they exit (as the jemalloc crash did):
    the loop's process still reports, and the report is classified as a crash."""
    out = bench_reader_stress.write_output(tmp_path / "data", 300, 2)
    cmd = [sys.executable, SCRIPT, "--child", str(out), "--stop", "3", "--records", "300"]
    cmd += ["--batch-size", "16", "--crash-at-exit"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    rep = json.loads(res.stdout.strip().splitlines()[-1])
    assert -signal.SIGSEGV in rep["worker_exitcodes"], rep
    verdict, detail = bench_reader_stress.classify(res.returncode, False, rep, res.stderr)
    assert verdict == "crash" and "SIGSEGV" in detail


def test_classify() -> None:
    good = {"worker_exitcodes": [0, 0, 0, 0], "error": None, "missing": 0, "repeated": 0, "foreign": 0}
    good |= {"records": 10, "expected": 10, "stop": 2}
    assert bench_reader_stress.classify(0, False, good, "") == ("ok", "")
    assert bench_reader_stress.classify(-6, False, good, "")[0] == "crash"  # the process itself aborted
    assert bench_reader_stress.classify(1, False, None, "killed by signal: Aborted")[0] == "crash"
    assert bench_reader_stress.classify(0, True, None, "")[0] == "other"  # a hang
    terminated = {**good, "worker_exitcodes": [0, -signal.SIGTERM]}
    assert bench_reader_stress.classify(0, False, terminated, "")[0] == "other"
    assert bench_reader_stress.classify(0, False, {**good, "missing": 1, "repeated": 1}, "")[0] == "wrong"
    assert bench_reader_stress.stop_at(0, 10) == 1 and all(
        1 <= bench_reader_stress.stop_at(i, 10) < 10 for i in range(100)
    )
