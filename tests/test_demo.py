"""`make demo` as the README promises it: four real torchx jobs; a rerun whose transform computes nothing."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from tdp_testutil import VENV_BIN

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e
def test_demo_runs_and_a_rerun_is_served_by_the_cache(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        "DEMO_DATA": str(tmp_path / "data"),
        "DEMO_OUT": str(tmp_path / "out"),
        "DEMO_N": "2000",
    }
    for attempt in range(2):  # the rerun: only the transform, which the cache serves in full
        run_env = {**env, "DEMO_STEPS": "transform"} if attempt else env
        demo = ["bash", str(ROOT / "examples/run_demo.sh")]
        proc = subprocess.run(demo, env=run_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        clean = json.loads((tmp_path / "out/clean/_SUCCESS").read_text())
        assert clean["records_in"] == 2000 and clean["bad"] == 0
        assert clean["cache"]["hits"] == (2000 if attempt else 0), clean["cache"]
        assert f"cache.db: {2000 if attempt else 0:,} hits, " in proc.stdout, proc.stdout[-2000:]
        if attempt:
            assert "== split" not in proc.stdout and "== transform" in proc.stdout
            continue
        train = json.loads((tmp_path / "out/split/_SUCCESS").read_text())["splits"]["train"]
        for epoch in (0, 1):  # examples/train.py: every train record once per epoch, over 2 ranks
            assert f"epoch {epoch}: {train:,} train records once each" in proc.stdout + proc.stderr
    split = json.loads((tmp_path / "out/split/_SUCCESS").read_text())
    assert sum(split["splits"].values()) == 2000
    assert (tmp_path / "out/stats/report.html").stat().st_size > 0
