"""Issue 22: ``datapipes.validate`` as a user runs it: one real ``torchx run`` as a failing CI gate."""

from __future__ import annotations

import json
from pathlib import Path

from tdp_testutil import run_op, run_torchx, write_jsonl
from test_validate import penguins

from torchx_datapipes.schema.__main__ import main as schema_main

REPO = Path(__file__).resolve().parents[1]


def test_ci_gate_fails_the_job_and_keeps_its_reports(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", penguins(1500))
    run_op("stats", str(tmp_path / "train.jsonl"), tmp_path / "base")  # the baseline, in-process
    assert schema_main(["infer", str(tmp_path / "base"), "-o", str(tmp_path / "schema.json")]) == 0
    recs = penguins(1500, seed=4)
    recs[6]["species"] = "Emperor"
    recs[900]["body_mass_g"] = "heavy"
    write_jsonl(tmp_path / "data/a.jsonl", recs[:700])
    write_jsonl(tmp_path / "data/b.jsonl", recs[700:])
    args = [
        "run", "-s", "local_cwd", "datapipes.validate", "--input", "data/*.jsonl", "--schema", "schema.json",
        "--output", "out", "--baseline", "base", "-j", "1x2", "--rdzv_port", "29661",
    ]  # fmt: skip
    res = run_torchx(args, tmp_path, env={"PYTHONPATH": str(REPO)})
    text = res.stdout + res.stderr
    assert res.returncode != 0, text
    assert "FAILED" in text, text[-3000:]
    # the job's error lists the anomalies with a file and line each
    assert "validation failed: 2 anomalies at or above --fail_on error" in text, text[-3000:]
    assert "a.jsonl:7" in text and "b.jsonl:201" in text
    out = tmp_path / "out"
    for name in ("stats.json", "anomalies.json", "report.html"):
        assert (out / name).stat().st_size > 0, name
    assert not (out / "_SUCCESS").exists()
    got = {(a["field"], a["kind"]): a for a in json.loads((out / "anomalies.json").read_text())}
    assert got[("species", "unexpected_values")]["examples"][0]["line"] == 7
    ex = got[("body_mass_g", "type_mismatch")]["examples"][0]
    assert ex["file"].endswith("data/b.jsonl") and ex["line"] == 201 and ex["value"] == "heavy"
    assert json.loads((out / "stats.json").read_text())["records"] == 1500
