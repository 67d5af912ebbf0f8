"""Issue 22 item 3: ``schema compare``: halves of one table do not drift, different populations do."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.schema.compare import compare_docs
from torchx_datapipes.schema.drift import SMALL_N
from torchx_datapipes.schema.stattests import chi2_sf, chi2_test, ks_pvalue
from torchx_datapipes.stats import StatsConfig, StatsPartial

CITIES = ("Lisbon", "Porto", "Braga", "Faro", "Coimbra", "Evora")


def table(n: int, seed: int, shift: float = 0.0, skew: float = 0.0) -> list[dict[str, Any]]:
    """A real-shaped table: a lognormal price, a bimodal age, a Zipf-ish city, a flag and an id."""
    rng = np.random.default_rng(seed)
    price = rng.lognormal(3 + shift, 0.6, n)
    age = np.where(rng.random(n) < 0.4, rng.normal(28, 4, n), rng.normal(52 + 10 * shift, 8, n))
    w = np.array([0.35, 0.25, 0.15, 0.1, 0.1, 0.05]) + skew * np.array([-0.3, 0, 0, 0, 0, 0.3])
    city = rng.choice(CITIES, size=n, p=w / w.sum())
    flag = rng.random(n) < 0.3
    return [
        {"id": i, "price": float(price[i]), "age": float(age[i]), "city": str(city[i]), "flag": bool(flag[i])}
        for i in range(n)
    ]


def stats_dir(path: Path, recs: list[dict[str, Any]]) -> Path:
    p = StatsPartial(StatsConfig())
    for i in range(0, len(recs), 4096):
        p.update(recs[i : i + 4096])
    path.mkdir(parents=True, exist_ok=True)
    (path / "stats.json").write_text(json.dumps(p.result()))
    return path


def halves(recs: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    order = np.random.default_rng(seed).permutation(len(recs))
    mid = len(recs) // 2
    return [recs[i] for i in order[:mid]], [recs[i] for i in order[mid:]]


@pytest.mark.parametrize("n", [800, 200_000], ids=["small-tests", "large-distances"])
def test_random_halves_do_not_drift_and_other_populations_do(tmp_path: Path, n: int) -> None:
    recs = table(n, seed=1)
    a, b = halves(recs, seed=2)
    da, db = stats_dir(tmp_path / "a", a), stats_dir(tmp_path / "b", b)
    # (shift 0.5: with the Holm correction across fields, a weak shift at n=400 is no longer called drift)
    dc = stats_dir(tmp_path / "c", table(n // 2, seed=3, shift=0.5, skew=0.5))
    same = {d.field: d for d in compare_docs(json.loads((da / "stats.json").read_text()),
                                             json.loads((db / "stats.json").read_text()))}  # fmt: skip
    methods = {"price": "ks", "age": "ks", "city": "chi2", "flag": "chi2"}
    if n > 2 * SMALL_N:
        methods = {"price": "js", "age": "js", "city": "linf", "flag": "linf"}
    for name, method in methods.items():
        assert same[name].method == method and not same[name].drifted, same[name]
    assert not same["id"].drifted
    if n <= 2 * SMALL_N:  # ids with gaps are id-like while the sketch is exact: no drift check
        assert not same["id"].checked
    assert schema_main(["compare", str(da), str(db), "--json", str(tmp_path / "same.json")]) == 0
    other = {d.field: d for d in compare_docs(json.loads((da / "stats.json").read_text()),
                                              json.loads((dc / "stats.json").read_text()))}  # fmt: skip
    for name in ("price", "age", "city"):
        assert other[name].drifted, other[name]
    assert schema_main(["compare", str(da), str(dc), "--json", str(tmp_path / "d.json")]) == 1
    report = json.loads((tmp_path / "d.json").read_text())
    assert set(report["drifted"]) >= {"price", "age", "city"}
    price = next(f for f in report["fields"] if f["field"] == "price")
    assert set(price["distances"]) >= {"js", "psi", "wasserstein", "ks", "linf"}
    assert set(price["errors"]) >= {"js", "psi", "wasserstein", "ks"}
    if n > 2 * SMALL_N:  # sketches in estimation mode: every distance carries a non-zero error bound
        assert all(v > 0 for v in price["errors"].values()), price["errors"]
        assert price["errors"]["ks"] < 0.02
    else:  # exact sketches: no error
        assert all(v == 0 for v in price["errors"].values()), price["errors"]


def test_compare_prints_a_table_and_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    da = stats_dir(tmp_path / "a", table(3000, seed=4))
    db = stats_dir(tmp_path / "b", table(3000, seed=5, shift=0.5))
    assert schema_main(["compare", str(da), str(db), "--html", str(tmp_path / "diff.html")]) == 1
    out = capsys.readouterr().out
    assert "price" in out and "DRIFT" in out and "fields drifted" in out
    page = (tmp_path / "diff.html").read_text()
    assert 'class="field drifted"' in page and "data:image/png;base64," in page
    assert schema_main(["compare", str(tmp_path / "nope"), str(db)]) == 2  # a usage error, not "drift"
    assert "does not exist" in capsys.readouterr().err


def test_per_field_thresholds_from_the_schema(tmp_path: Path) -> None:
    da = stats_dir(tmp_path / "a", table(3000, seed=4))
    db = stats_dir(tmp_path / "b", table(3000, seed=5, shift=0.5))
    schema_main(["infer", str(da), "-o", str(tmp_path / "s.json")])
    s = json.loads((tmp_path / "s.json").read_text())
    s["fields"]["price"]["drift_threshold"] = 0.9  # a loose JS threshold: no longer drifts
    s["fields"]["age"]["drift"] = False
    (tmp_path / "s.json").write_text(json.dumps(s))
    rc = schema_main(
        ["compare", str(da), str(db), "--schema", str(tmp_path / "s.json"), "--json", f"{tmp_path}/d"]
    )
    report = {f["field"]: f for f in json.loads((tmp_path / "d").read_text())["fields"]}
    assert not report["price"]["drifted"] and report["price"]["threshold"] == 0.9
    assert not report["age"]["checked"] and rc == (1 if report["city"]["drifted"] else 0)


def test_p_values_match_known_values() -> None:
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, abs=1e-9)  # scipy.stats.chi2.sf
    assert chi2_sf(11.070497693516351, 5) == pytest.approx(0.05, abs=1e-9)
    assert chi2_test([50, 50], [50, 50]) == pytest.approx(1.0)
    assert ks_pvalue(0.0, 100, 100) == 1.0 and ks_pvalue(0.5, 100, 100) < 1e-9
    # the asymptotic Kolmogorov tail 2 exp(-2 n_eff D^2) (scipy's kstwobign), with Stephens' correction
    assert ks_pvalue(0.1, 1000, 1000) == pytest.approx(2 * math.exp(-2 * 500 * 0.1**2), rel=0.15)
