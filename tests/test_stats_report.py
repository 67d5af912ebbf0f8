"""report.html / stats.md: self-contained, escaped, and rendered by headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest

from torchx_datapipes.stats import SCHEMA_VERSION, StatsConfig, StatsPartial, write_reports
from torchx_datapipes.stats.summary import COLUMNS

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
    for name in numeric:  # small-cardinality integers get one bar per value instead of a histogram
        chart = "bars" if doc["fields"][name]["numeric"]["value_counts"] else "hist"
        assert re.search(
            rf'<img id="{chart}-{re.escape(name)}" alt="[^"]+" src="data:image/png;base64,', page
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
    assert "| x | float | 5,000 |" in md  # names are escaped plain text, no longer code spans
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
    assert page.count("<img ") == 1 and 'id="bars-n"' in page


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


# --- data that looks like markup (issue 12, item 9) -------------------------------------------

MARKUP = [
    "$\\foo$",
    "$x^2$",
    "two\nlines",
    "[x](javascript:alert(1))",
    "![i](javascript:alert(1))",
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "javascript:alert(1)",
    "a|b `c` *d* _e_ # f & ~g~",
    "esc \x1b[31mred",
]
NUMERIC_NAME = "$\\sqrt{n}$ <b>n</b> [n](javascript:alert(1))"
LIST_NAME = "$\\bar{l}$ | <i>list</i>"
HTML_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "dl", "dt", "dd"),
    *("div", "table", "thead", "tbody", "tr", "th", "td", "a", "section", "span", "figure", "img", "footer"),
    "wbr",
}
MD_MARKUP = set("\\`*_#[]()<>|&!~$")


def markup_records(n: int = 120) -> list[dict[str, Any]]:
    k = len(MARKUP)
    return [
        {
            **{name: MARKUP[(i + j) % k] for j, name in enumerate(MARKUP)},
            NUMERIC_NAME: i % 17,
            LIST_NAME: [MARKUP[i % k], MARKUP[(i + 3) % k]],
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def markup_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stats op, in-process as a user runs it, on JSONL whose names and values are markup."""
    from tdp_testutil import run_op, write_jsonl

    root = tmp_path_factory.mktemp("markup")
    inp = write_jsonl(root / "in.jsonl", markup_records())
    manifest = run_op("stats", str(inp), root / "out")
    assert manifest["status"] == "SUCCEEDED", manifest
    return root / "out"


class _Page(HTMLParser):
    """Every tag, attribute and text node of report.html, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_stats_op_on_markup_data_writes_all_outputs(markup_out: Path) -> None:
    stats = json.loads((markup_out / "stats.json").read_text())
    assert set(stats["fields"]) == {*MARKUP, NUMERIC_NAME, LIST_NAME}  # names kept exactly
    top = {t["value"] for t in stats["fields"]["$x^2$"]["string"]["top"]}
    assert top == set(MARKUP)
    page = (markup_out / "report.html").read_text()
    # a top-k chart per string field (and the list's elements), a histogram for the numbers
    assert page.count("<img ") == len(MARKUP) + 2


def test_report_html_never_carries_markup_data_as_html(markup_out: Path) -> None:
    page = (markup_out / "report.html").read_text()
    for nasty in ("<script", "<img src=x", "<b>n</b>", "<i>list</i>"):  # as text they are escaped
        assert nasty not in page
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert {tag for tag, _ in parser.tags} <= HTML_TAGS
    for tag, attrs in parser.tags:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "src"):
                url = (value or "").strip().lower()
                assert url.startswith(("#", "data:image/png;base64,")), (tag, name, value)
                assert not url.startswith("javascript:")
    text = "".join(parser.text)
    for value in ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', NUMERIC_NAME):
        assert value in text  # shown to the reader as text, not dropped


def _unescaped(line: str) -> list[str]:
    """Markdown punctuation in ``line`` that no backslash escapes (CommonMark rules)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in MD_MARKUP:
            i += 2
            continue
        if line[i] in MD_MARKUP:
            out.append(line[i])
        i += 1
    return out


def test_stats_md_escapes_markup_data(markup_out: Path) -> None:
    md = (markup_out / "stats.md").read_text()
    lines = md.splitlines()
    assert "\x1b" not in md and "esc \\\\x1b\\[31mred" in md  # no terminal escape sequence
    for raw in ("[x](javascript:alert(1))", "$x^2$", "two\nlines"):
        assert raw not in md, raw
    assert not [line for line in lines if "<" in _unescaped(line)]  # no HTML tag can open
    assert "\\[x\\]\\(javascript:alert\\(1\\)\\)" in md and "\\$x^2\\$" in md
    header = next(i for i, line in enumerate(lines) if line.startswith("| field |"))
    rows = [line for line in lines[header + 2 :] if line.startswith("| ")]
    assert len(rows) == len(MARKUP) + 2  # one line per field: the newline in a name did not split it
    ncols = len(COLUMNS)
    for row in rows:  # the only live markup in a row is the table's own pipes
        assert _unescaped(row) == ["|"] * (ncols + 1), row
    for line in lines[:header]:
        if line.startswith("- **"):  # run info: only the bullet's own bold markers are live
            assert _unescaped(line) == ["*", "*", "*", "*"], line


def test_chart_text_is_never_parsed_as_math(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Text drawn with a field name or value has mathtext and LaTeX off."""
    import matplotlib.text

    from torchx_datapipes.stats import charts

    drawn: list[tuple[str, bool, bool]] = []
    draw = matplotlib.text.Text.draw

    def spy(self: matplotlib.text.Text, renderer: Any) -> None:
        drawn.append((self.get_text(), self.get_parse_math(), self.get_usetex()))
        draw(self, renderer)

    monkeypatch.setattr(matplotlib.text.Text, "draw", spy)
    top = [{"value": v, "count": 10 - i, "lower": 10 - i} for i, v in enumerate(MARKUP)]
    charts.top_k_png("$\\foo$", {"top": top, "top_exact": True, "top_max_error": 0})
    hist = {"edges": [0.0, 1.0, 2.0], "counts": [3, 4], "exact": True, "count_error": 0.0}
    charts.histogram_png("$x^2$", {"histogram": hist, "median": 1.0})
    with_data = [d for d in drawn if "$" in d[0] or "javascript" in d[0] or "median" in d[0]]
    assert len(with_data) >= len(MARKUP)
    assert all(parse_math is False and usetex is False for _, parse_math, usetex in with_data), with_data
