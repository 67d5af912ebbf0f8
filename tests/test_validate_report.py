"""Issue 22 item 5: the side-by-side validation report renders offline in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tdp_testutil import run_op, write_jsonl
from test_validate import penguins

from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.schema.validate import AnomaliesFoundError

CHROMIUM = "/usr/bin/chromium"


def chromium(page: Path, shot: Path, tmp: Path) -> str:
    """Render ``page`` headless to ``shot``; return Chromium's log (console messages included)."""
    exe = shutil.which("chromium") or CHROMIUM
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{CHROMIUM} is not installed: apt-get install chromium (needed to render report.html)")
    cmd = [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp / 'profile'}", f"--screenshot={shot}",
        "--window-size=1280,2400", page.as_uri(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert shot.exists(), f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    return proc.stderr


def console_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r":CONSOLE[:(]", line)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing validate run against a baseline: anomalies with examples and drifting fields."""
    root = tmp_path_factory.mktemp("vreport")
    write_jsonl(root / "train.jsonl", penguins(3000))
    run_op("stats", str(root / "train.jsonl"), root / "base")
    schema_main(["infer", str(root / "base"), "-o", str(root / "schema.json")])
    recs = penguins(3000, seed=8, shift=5.0)
    recs[2]["species"] = "<script>alert('Emperor')</script>"
    recs[9]["bill_length_mm"] = "n/a"
    write_jsonl(root / "new.jsonl", recs)
    with pytest.raises(AnomaliesFoundError):
        run_op("validate", str(root / "new.jsonl"), root / "v", "--schema", str(root / "schema.json"),
               "--baseline", str(root / "base"))  # fmt: skip
    return root / "v" / "report.html"


def test_report_content(report: Path) -> None:
    page = report.read_text()
    assert page.index("Anomalies (") < page.index("Drift (baseline") < page.index("<h2>Fields")
    assert "new.jsonl:3" in page and "new.jsonl:10" in page  # example records: file:line
    assert "<script>alert" not in page and "&lt;script&gt;" in page  # data is escaped
    assert 'class="field drifted"' in page and '<tr class="drifted">' in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing loads from the network
    assert page.count("data:image/png;base64,") >= 5


def test_report_renders_in_chromium_without_console_errors(report: Path, tmp_path: Path) -> None:
    # the detector itself: a page that logs to the console is caught
    probe = tmp_path / "probe.html"
    probe.write_text('<html><body><script>console.error("probe-error")</script></body></html>')
    assert any("probe-error" in line for line in console_lines(chromium(probe, tmp_path / "p.png", tmp_path)))
    shot = tmp_path / "shot.png"
    log = chromium(report, shot, tmp_path)
    assert console_lines(log) == [], console_lines(log)
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[:2] == (2400, 1280)
    assert len(np.unique(pixels[::4, ::4, :3].reshape(-1, 3), axis=0)) > 50
    red = np.all(np.abs(pixels[:, :, :3] - np.array([0xE4, 0x57, 0x56]) / 255) < 0.02, axis=-1)
    assert red.sum() > 500, "no drift highlight visible"
    json.dumps(str(shot))
