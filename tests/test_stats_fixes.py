"""Issue 22 item 6: stats fixes found on real data, one regression test each."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.stats import StatsConfig, StatsPartial, write_reports
from torchx_datapipes.stats.fieldcheck import UnknownFieldError
from torchx_datapipes.stats.summary import field_row, near_unique, type_label


def profile(records: list[Any], **config: Any) -> dict[str, Any]:
    p = StatsPartial(StatsConfig(**config))
    for i in range(0, len(records), 1000):
        p.update(records[i : i + 1000])
    return p.result()


def test_exact_quantiles_interpolate_like_pandas() -> None:
    bill = [39.1, 39.5, 40.3, 36.7, 39.3, 38.9, 39.2, 34.1, 42.0, 37.8, 44.5, 44.4]  # an even count
    num = profile([{"bill": v} for v in bill])["fields"]["bill"]["numeric"]
    s = pd.Series(bill)
    assert num["quantiles_exact"] and num["quantiles_method"] == "linear"
    assert num["median"] == pytest.approx(s.median())
    for q in num["quantiles"]:
        assert q["value"] == pytest.approx(s.quantile(q["q"])), q
    assert profile([{"x": v} for v in (1, 2, 3, 4)])["fields"]["x"]["numeric"]["median"] == 2.5


def test_sketch_quantiles_are_labelled_estimates(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    doc = profile([{"x": float(v)} for v in rng.normal(0, 1, 20_000)], kll_k=50)
    num = doc["fields"]["x"]["numeric"]
    assert not num["quantiles_exact"] and num["quantiles_method"] == "kll"
    page = Path(write_reports(doc, str(tmp_path))[0]).read_text()
    assert "≈ sketch estimates, rank error" in page and "exact, linear" not in page
    assert field_row("x", doc["fields"]["x"], doc["records"]).cells[7].startswith("≈")


def test_near_unique_strings_get_no_top_chart(tmp_path: Path) -> None:
    recs = [{"name": f"person {i}", "cat": "ab"[i % 2], "big": f"u{i}"} for i in range(3000)]
    doc = profile(recs, exact_distinct_limit=1000)
    name, big = doc["fields"]["name"]["string"], doc["fields"]["big"]["string"]
    assert near_unique(name) and near_unique(big) and not near_unique(doc["fields"]["cat"]["string"])
    page = Path(write_reports(doc, str(tmp_path))[0]).read_text()
    assert 'id="topk-cat"' in page
    assert 'id="topk-name"' not in page and 'id="topk-big"' not in page
    # exact counts: the summary says so instead of showing one value "(1)"
    row = field_row("name", doc["fields"]["name"], doc["records"])
    assert row.cells[-1] == "none repeated (every value distinct)"


def test_sketch_top_chart_draws_only_guaranteed_counts() -> None:
    from torchx_datapipes.stats import charts

    # a heavy hitter among unique values: only it is drawn, never a "count 2" for a value seen once
    recs = [{"s": "hot" if i % 10 == 0 else f"u{i}"} for i in range(20_000)]
    s = profile(recs, exact_distinct_limit=100, frequent_lg_map_size=6)["fields"]["s"]["string"]
    assert not s["top_exact"] and s["top"][0]["value"] == "hot" and not near_unique(s)
    assert s["top"][0]["lower"] <= 2000 <= s["top"][0]["upper"]
    drawn = [t for t in s["top"] if t["lower"] > s["top_max_error"]]
    assert [t["value"] for t in drawn] == ["hot"]
    assert charts.top_k_png("s", s)[:4] == b"\x89PNG"


def test_a_float_among_ints_shows_a_nonzero_share() -> None:
    assert type_label({"int": 406, "float": 1}) == "int >99% · float <1%"
    assert type_label({"int": 1, "float": 1}) == "int 50% · float 50%"
    doc = profile([{"v": i} for i in range(406)] + [{"v": 0.5}])
    assert "float <1%" in field_row("v", doc["fields"]["v"], doc["records"]).cells[1]


def test_monthly_dates_bin_on_calendar_months() -> None:
    months = [dt.date(2007 + m // 12, m % 12 + 1, 1) for m in range(36)]
    recs = [{"d": d} for d in months for _ in range(3)]
    t = profile(recs)["fields"]["d"]["date"]
    hist = t["histogram"]
    assert hist["unit"] == "1 month"
    assert all(e.endswith("-01") or e.endswith("-01T00:00:00") for e in hist["edges"]), hist["edges"]
    assert hist["counts"] == [3] * 36 and hist["edges"][0] == "2007-01-01"


def test_long_names_wrap_at_word_boundaries(tmp_path: Path) -> None:
    name = "culmen_length_millimetres_measuredWithCalipers"
    doc = profile([{name: float(i)} for i in range(50)])
    page = Path(write_reports(doc, str(tmp_path))[0]).read_text()
    wrapped = "culmen_<wbr>length_<wbr>millimetres_<wbr>measured<wbr>With<wbr>Calipers"
    assert page.count(wrapped) == 2 and f'title="{name}"' in page
    assert "overflow-wrap:anywhere}" not in page.split(".summary td.l")[1].split("\n")[0]


def test_typo_in_fields_refused_on_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "d.jsonl", [{"id": i, "x": i / 2} for i in range(20)])
    with pytest.raises(InvalidArgumentError) as e:
        components.stats(input=str(tmp_path / "d.jsonl"), output=str(tmp_path / "o"), fields="id,idd")
    msg = str(e.value)
    assert "'idd' (did you mean 'id'?)" in msg and "fields there: id, x" in msg
    components.stats(input=str(tmp_path / "d.jsonl"), output=str(tmp_path / "o"), fields="id,x")  # accepted
    (tmp_path / "t.csv").write_text("id,name\n1,a\n2,b\n")
    with pytest.raises(InvalidArgumentError, match="columns of .*t.csv; fields there: id, name"):
        components.stats(input=str(tmp_path / "t.csv"), output=str(tmp_path / "o2"), fields="nme")


def test_typo_in_fields_refused_by_runner_before_work(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [{"id": i} for i in range(20)])
    with pytest.raises(UnknownFieldError, match="'idd' \\(did you mean 'id'\\?\\)"):
        run_op("stats", str(tmp_path / "d.jsonl"), tmp_path / "o", "--fields", "idd")
    assert not list((tmp_path / "o").glob("_units/*.stats"))  # refused before any unit ran


def test_integer_beyond_64_bits_is_profiled(tmp_path: Path) -> None:
    big = '{"id": 1, "big": 123456789012345678901234567890}\n{"id": 2, "big": 5}\n'
    (tmp_path / "big.jsonl").write_text(big)
    run_op("stats", str(tmp_path / "big.jsonl"), tmp_path / "o")
    f = json.loads((tmp_path / "o/stats.json").read_text())["fields"]["big"]
    assert f["types"] == {"int": 2} and f["numeric"]["max"] == pytest.approx(1.2345678901234568e29)
    assert f["numeric"]["value_counts"] is None  # float64 cannot count such integers exactly


def test_constant_and_id_like_flagged(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    ids = rng.permutation(200)
    recs = [{"id": int(ids[i]), "key": f"k{i}", "one": 7, "site": "x", "v": float(i % 5)} for i in range(200)]
    doc = profile(recs)
    flags = {n: f["flags"] for n, f in doc["fields"].items()}
    want = {"id": ["id-like"], "key": ["id-like"], "one": ["constant"], "site": ["constant"], "v": []}
    assert flags == want
    assert field_row("one", doc["fields"]["one"], 200).cells[1] == "int · constant"
    assert field_row("key", doc["fields"]["key"], 200).cells[1] == "string · id-like"
    md = (Path(write_reports(doc, str(tmp_path))[1])).read_text()
    assert "string · id-like" in md
