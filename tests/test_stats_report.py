"""report.html / stats.md: self-contained, escaped, and rendered by headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from torchx_datapipes.stats import SCHEMA_VERSION, StatsConfig, StatsPartial, write_reports

NASTY = '<b>a|b&"c"</b>'
CHROMIUM = "/usr/bin/chromium"


def make_doc(n: int = 5000, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    x, y, z = rng.lognormal(0, 0.7, n), rng.normal(10, 3, n), rng.zipf(1.5, n)
    y[::97] = np.nan
    cats = ["alpha", "beta", "gamma", "delta"]
    records: list[Any] = [
        {
            "id": i,
            "x": float(x[i]),
            "y": float(y[i]),
            "tag": f"tag{z[i] % 3000}",
            "cat": cats[i % 7 % 4],
            "vec": [float(v) for v in rng.normal(0, 1, i % 4)],
            "flag": bool(i % 3),
            NASTY: "<script>alert(1)</script>" if i % 2 else None,
        }
        for i in range(n)
    ]
    records.append(7)  # a non-object record: profiled as "$value"
    partial = StatsPartial(StatsConfig(top_k=10))
    for i in range(0, len(records), 1000):
        partial.update(records[i : i + 1000])
    return {
        "schema_version": SCHEMA_VERSION,
        **partial.result(),
        "bad_records": 2,
        "inputs": ["file:///data/a.jsonl", "s3://bucket/b.jsonl"],
        "manifest": {"units": 3},
    }


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return make_doc()


@pytest.fixture(scope="module")
def report_dir(doc: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    paths = write_reports(doc, str(out))
    assert paths == [str(out / "report.html"), str(out / "stats.md")]
    return out


def test_html_has_chart_per_field(doc: dict[str, Any], report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text()
    numeric = [n for n, f in doc["fields"].items() if f["numeric"] and f["numeric"]["histogram"]]
    strings = [n for n, f in doc["fields"].items() if f["string"] and f["string"]["top"]]
    assert {"id", "x", "y"} <= set(numeric) and {"tag", "cat"} <= set(strings)
    for name in numeric:
        assert re.search(
            rf'<img id="hist-{re.escape(name)}" alt="[^"]+" src="data:image/png;base64,', page
        ), name
    for name in strings:
        assert f'id="topk-{name}"' in page.replace("&lt;", "<").replace("&gt;", ">").replace(
            "&quot;", '"'
        ).replace("&amp;", "&")
    assert 'id="hist-vec[]"' in page  # list elements get their own histogram
    assert page.count("<img ") == len(numeric) + len(strings) + 1


def test_html_is_self_contained(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text()
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page)
    assert refs and all(r.startswith(("data:image/png;base64,", "#")) for r in refs)
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page


def test_html_escapes_names_and_values(report_dir: Path) -> None:
    page = (report_dir / "report.html").read_text()
    assert NASTY not in page and "<script>alert" not in page
    assert "&lt;b&gt;a|b&amp;&quot;c&quot;&lt;/b&gt;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_markdown_table(doc: dict[str, Any], report_dir: Path) -> None:
    md = (report_dir / "stats.md").read_text()
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| field |"))
    assert re.fullmatch(r"\|(:?---:?\|)+", lines[header + 1])
    rows = [line for line in lines[header + 2 :] if line.startswith("| ")]
    assert len(rows) == len(doc["fields"])
    ncols = lines[header].count(" | ") + 1
    for row in rows:  # escaped pipes keep every row at the header's width
        assert len(re.findall(r"(?<!\\)\|", row)) == ncols + 1, row
    assert "| `x` | float | 5,000 |" in md
    assert "**bad records**: 2" in md and "<script>" not in md


def test_write_to_memory_fs(doc: dict[str, Any]) -> None:
    paths = write_reports(doc, "memory://stats-report-test/out/")
    assert paths == ["memory://stats-report-test/out/report.html", "memory://stats-report-test/out/stats.md"]
    fs = fsspec.filesystem("memory")
    assert fs.cat(paths[0]).startswith(b"<!DOCTYPE html>")
    assert b"| field |" in fs.cat(paths[1])
    fs.rm("/stats-report-test", recursive=True)


def test_empty_and_degenerate_docs(tmp_path: Path) -> None:
    empty = StatsPartial(StatsConfig()).result()
    assert len(write_reports(empty, str(tmp_path / "empty"))) == 2
    p = StatsPartial(StatsConfig(fields=("n", "absent")))
    p.update([{"n": float("nan")}, {"n": None}, {"n": 5}])
    paths = write_reports(p.result(), str(tmp_path / "degenerate"))
    page = Path(paths[0]).read_text()
    assert page.count("<img ") == 1 and 'id="hist-n"' in page


def test_chromium_screenshot(report_dir: Path, tmp_path: Path) -> None:
    """Render the page headless; fails (not skips) when Chromium is missing."""
    chromium = shutil.which("chromium") or CHROMIUM
    if not os.access(chromium, os.X_OK):
        pytest.fail(f"{CHROMIUM} is not installed: apt-get install chromium (needed to render report.html)")
    shot = tmp_path / "shot.png"
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1280,2000",
        (report_dir / "report.html").as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert shot.exists(), f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    assert shot.stat().st_size > 10_000
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[:2] == (2000, 1280)
    colours = np.unique(pixels[::4, ::4, :3].reshape(-1, 3), axis=0)
    assert len(colours) > 50, "screenshot is (almost) a single colour"
    # the page background is light and the charts' bars are the report's blue (#4c78a8)
    blue = np.all(np.abs(pixels[:, :, :3] - np.array([0x4C, 0x78, 0xA8]) / 255) < 0.02, axis=-1)
    assert blue.sum() > 5_000, "no chart bars visible in the screenshot"
