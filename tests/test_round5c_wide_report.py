"""Issue 32, item 8: a wide table's report draws charts for the first fields only, and draws them together.

The report used to draw one chart per field, one after another (789 columns: 217 s of a 230 s job;
10,000 did not finish in 14 minutes). Now the first ``MAX_CHARTED_FIELDS`` fields get charts, all
fields keep their card and summary row, a note says how many were drawn, and the charts are drawn
here and in helper interpreters, with the same PNGs as drawn one by one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tdp_testutil import run_op

from torchx_datapipes.stats import StatsConfig, StatsPartial, charts, report


def wide_doc(columns: int, rows: int = 40) -> dict[str, Any]:
    recs = [
        {f"c{c:04d}": (r * 31 + c) % 97 / 3.0 if c % 2 else f"v{(r + c) % 4}" for c in range(columns)}
        for r in range(rows)
    ]
    partial = StatsPartial(StatsConfig())
    partial.update(recs)
    return partial.result()


def _chart_ids(page: str) -> list[str]:
    return re.findall(r'<img id="([^"]+)"', page)


def test_only_the_first_fields_get_charts_and_every_field_keeps_its_card() -> None:
    doc = wide_doc(12)
    page = report.render_html(doc, charted=5)
    ids = _chart_ids(page)
    assert ids == ["topk-c0000", "hist-c0001", "topk-c0002", "hist-c0003", "topk-c0004"]
    assert "Charts are drawn for the first 5 of 12 fields" in page
    for name in doc["fields"]:
        assert f'id="field-{name}"' in page and f'href="#field-{name}"' in page
    full = report.render_html(doc, charted=12)
    assert len(_chart_ids(full)) == 12 and "Charts are drawn for the first" not in full
    assert _chart_ids(report.render_html(doc, charted=0)) == []
    with pytest.raises(ValueError, match="charted must be >= 0.*got -1"):
        report.render_html(doc, charted=-1)


def test_the_stats_job_draws_at_most_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[str] = []
    stub = charts.draw(("bars", "x", {"value_counts": [{"value": 1, "count": 1}]}))

    def count(job: charts.ChartJob) -> bytes:
        drawn.append(job[1])
        return stub

    monkeypatch.setattr(charts, "draw", count)
    monkeypatch.setattr(charts, "_helpers", lambda n: 0)  # in this process, where the stub is
    columns = report.MAX_CHARTED_FIELDS + 50
    src = tmp_path / "in/wide.jsonl"
    src.parent.mkdir()
    src.write_text(
        "".join(json.dumps({f"c{c:04d}": float(r + c) for c in range(columns)}) + "\n" for r in range(3))
    )
    run_op("stats", str(src), tmp_path / "o")
    assert drawn == [f"c{c:04d}" for c in range(report.MAX_CHARTED_FIELDS)]
    page = (tmp_path / "o/report.html").read_text()
    assert len(_chart_ids(page)) == report.MAX_CHARTED_FIELDS
    assert f"first {report.MAX_CHARTED_FIELDS} of {columns} fields" in page
    assert page.count('<section class="field"') == columns


def test_charts_drawn_by_a_helper_are_the_same_pngs() -> None:
    doc = wide_doc(6)
    jobs = [(k, lab, sec) for n, f in doc["fields"].items() for _, _, k, lab, sec in report._charts(n, f)]
    assert len(jobs) == 6
    assert charts.draw_all(jobs, helpers=1) == [charts.draw(j) for j in jobs]


def test_a_failing_helper_is_drawn_here_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = wide_doc(4)
    jobs = [(k, lab, sec) for n, f in doc["fields"].items() for _, _, k, lab, sec in report._charts(n, f)]
    monkeypatch.setattr(charts.sys, "executable", "/nonexistent/python")
    with pytest.warns(UserWarning, match="helper process drawing 2 report charts failed"):
        got = charts.draw_all(jobs, helpers=1)
    assert got == [charts.draw(j) for j in jobs]
