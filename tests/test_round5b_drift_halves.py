"""Issue 32 item 6: no drift between random halves of a penguins-shaped table, drift between species.

The table is made here (seeded) in the shape of the Palmer penguins raw table: 344 rows, 17 fields,
among them ``Individual ID`` (190 values, most seen twice: sparse counts that a chi-square test must
not be run on as they are), ``Clutch Completion`` (a skewed Yes/No) and an integer row id. 17 tests
at alpha 0.05 would flag a field on most comparisons of two random halves; the tests are corrected
for multiplicity across fields (Holm), rare categories are merged before the chi-square test, and
ids are not drift-tested. Adelie-only against Gentoo-only still drifts on the species-dependent
measurements."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.schema.compare import compare_docs
from torchx_datapipes.schema.drift import Drift
from torchx_datapipes.schema.stattests import chi2_test, holm, merge_rare
from torchx_datapipes.stats import StatsConfig, StatsPartial

# species: (count, long name, islands, culmen length, culmen depth, flipper, body mass, d15N, d13C)
SPECIES = {
    "Adelie": (152, "Adelie Penguin (Pygoscelis adeliae)", ("Torgersen", "Biscoe", "Dream"),
               (38.8, 2.7), (18.3, 1.2), (190.0, 6.5), (3700.0, 460.0), (8.86, 0.42), (-25.8, 0.59)),
    "Gentoo": (124, "Gentoo penguin (Pygoscelis papua)", ("Biscoe",),
               (47.5, 3.1), (15.0, 1.0), (217.2, 6.5), (5076.0, 504.0), (8.25, 0.26), (-26.2, 0.54)),
    "Chinstrap": (68, "Chinstrap penguin (Pygoscelis antarctica)", ("Dream",),
                  (48.8, 3.3), (18.4, 1.1), (195.8, 7.1), (3733.0, 384.0), (9.36, 0.37), (-24.6, 0.24)),
}  # fmt: skip
N_IDS = 190


def penguins(seed: int = 0) -> list[dict[str, Any]]:
    """344 records, 17 fields, the raw table's shape (nulls, codes, sparse ids); ``species`` kept aside."""
    rng = np.random.default_rng(seed)
    ids = [f"N{1 + i // 2}A{1 + i % 2}" for i in range(N_IDS)]
    # 190 individuals over 344 rows: every id at least once, the others re-sampled (nests seen twice)
    id_of = np.concatenate([np.arange(N_IDS), rng.integers(0, N_IDS, 344 - N_IDS)])
    rng.shuffle(id_of)
    recs: list[dict[str, Any]] = []
    for count, long, islands, cl, cd, fl, bm, n15, c13 in SPECIES.values():
        for k in range(count):
            missing = rng.random() < 0.01
            study = str(rng.choice(("PAL0708", "PAL0809", "PAL0910")))
            year = {"PAL0708": 2007, "PAL0809": 2008, "PAL0910": 2009}[study]
            day = datetime.date(year, 11, 1) + datetime.timedelta(days=int(rng.integers(0, 30)))

            def gauss(m: tuple[float, float], nd: int, missing: bool = missing) -> float | None:
                return None if missing else round(float(rng.normal(*m)), nd)

            recs.append(
                {
                    "studyName": study,
                    "Sample Number": k + 1,
                    "Species": long,
                    "Region": "Anvers",
                    "Island": str(rng.choice(islands)),
                    "Clutch Completion": "Yes" if rng.random() < 0.9 else "No",
                    "Date Egg": day.isoformat(),
                    "Culmen Length (mm)": gauss(cl, 1),
                    "Culmen Depth (mm)": gauss(cd, 1),
                    "Flipper Length (mm)": None if missing else int(round(rng.normal(*fl))),
                    "Body Mass (g)": None if missing else int(25 * round(rng.normal(*bm) / 25)),
                    "Sex": None if missing else str(rng.choice(("MALE", "FEMALE"))),
                    "Delta 15 N (o/oo)": None if rng.random() < 0.04 else gauss(n15, 5),
                    "Delta 13 C (o/oo)": None if rng.random() < 0.04 else gauss(c13, 5),
                    "Comments": None
                    if rng.random() < 0.92
                    else str(
                        rng.choice(
                            (
                                "Not enough blood for isotopes.",
                                "Nest never observed with full clutch.",
                                "Adult not sampled.",
                            )
                        )
                    ),  # fmt: skip
                }
            )
    for i, r in enumerate(recs):
        r["Individual ID"] = ids[id_of[i]]
    rows = [{"row": i + 1, **r} for i, r in enumerate(recs)]  # the integer row id: 17 fields in all
    assert len(rows) == 344 and all(len(r) == 17 for r in rows)
    return rows


def profile(recs: list[dict[str, Any]]) -> dict[str, Any]:
    p = StatsPartial(StatsConfig())
    p.update(recs)
    return json.loads(json.dumps(p.result()))  # type: ignore[no-any-return]


def halves(recs: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    order = np.random.default_rng(seed).permutation(len(recs))
    mid = len(recs) // 2
    return [recs[i] for i in sorted(order[:mid])], [recs[i] for i in sorted(order[mid:])]


def drifted(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[Drift]:
    return [d for d in compare_docs(profile(a), profile(b)) if d.drifted]


def false_alarms(table: list[dict[str, Any]], seeds: range) -> dict[int, list[str]]:
    return {seed: [d.field for d in drifted(*halves(table, seed))] for seed in seeds}


def test_random_halves_of_penguins_do_not_drift() -> None:
    """Holm keeps the chance of any false alarm among the fields at 5% per comparison (family-wise):
    about 1 comparison in 20 still flags a field by design, so the rate is measured on 200 seeds.
    Measured: 2 of the first 20 comparisons (one field each), 11 of 200 (13 fields in all); without
    the correction 71 of 200 comparisons flagged 118 fields."""
    table = penguins()
    first = false_alarms(table, range(20))
    shown = {k: v for k, v in first.items() if v}
    print(f"false alarms, seeds 0-19: {sum(map(len, first.values()))}: {shown}")
    assert sum(1 for v in first.values() if v) <= 2 and all(len(v) <= 1 for v in first.values()), first
    alarms = false_alarms(table, range(200))
    flagged = sum(1 for v in alarms.values() if v)
    print(f"false alarms, 200 seeds: {flagged} comparisons, {sum(map(len, alarms.values()))} fields")
    assert flagged <= 16, alarms  # binomial(200, 0.05): mean 10, sd 3.1; at 0.05 uncorrected ~70
    assert not any("Individual ID" in v or "row" in v for v in alarms.values())


def test_ids_and_sparse_categories_are_reported_not_tested() -> None:
    a, b = halves(penguins(), seed=0)
    got = {d.field: d for d in compare_docs(profile(a), profile(b))}
    assert not got["row"].checked and "id-like" in got["row"].note  # an integer id, no schema
    ind = got["Individual ID"]  # 190 values over 172 rows: nothing left to test once rare values merge
    assert not ind.drifted and not ind.checked and "rare" in ind.note, ind
    assert got["Clutch Completion"].method == "chi2" and got["Clutch Completion"].correction == "holm"
    tested = [d for d in got.values() if d.method in ("ks", "chi2")]
    assert all(d.tests == len(tested) for d in tested)
    for d in tested:  # the reported value is the adjusted p, at least the raw one
        assert d.value is not None and d.value >= (d.distances[f"{d.method}_p"] or 0.0)


def test_adelie_against_gentoo_drifts() -> None:
    table = penguins()
    adelie = [r for r in table if r["Species"].startswith("Adelie")]
    gentoo = [r for r in table if r["Species"].startswith("Gentoo")]
    got = {d.field for d in drifted(adelie, gentoo)}
    measured = {"Culmen Length (mm)", "Culmen Depth (mm)", "Flipper Length (mm)", "Body Mass (g)",
                "Delta 15 N (o/oo)", "Delta 13 C (o/oo)"}  # fmt: skip
    assert measured <= got, got
    assert {"Species", "Island"} <= got, got


def test_holm_adjusted_p_values() -> None:
    # Holm (1979): sorted p (0.01, 0.02, 0.03, 0.5) times (4, 3, 2, 1), running maximum, capped at 1
    assert holm([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.06, 0.5, 0.04, 0.06])
    assert holm([]) == [] and holm([0.2]) == [0.2]
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # 0.8 * 2 caps at 1; the running maximum


def test_rare_categories_merge_before_the_chi_square_test() -> None:
    a = [40.0, 40.0, 1.0, 1.0, 0.0, 2.0]
    b = [42.0, 38.0, 0.0, 2.0, 1.0, 1.0]
    x, y = merge_rare(a, b)
    assert x == [40.0, 40.0, 4.0] and y == [42.0, 38.0, 4.0]  # expected counts < 5 pooled as "other"
    assert chi2_test(a, b) == pytest.approx(chi2_test(x, y))  # chi2_test merges on its own
    # one value per category (an id): nothing is left to test
    assert merge_rare([1.0] * 50, [1.0] * 50) == ([50.0], [50.0])


def test_compare_json_keeps_its_fields_and_adds_the_correction(tmp_path: Path) -> None:
    a, b = halves(penguins(), seed=3)
    for name, part in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stats.json").write_text(json.dumps(profile(part)))
    rc = schema_main(
        ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", str(tmp_path / "d.json")]
    )
    doc = json.loads((tmp_path / "d.json").read_text())
    assert rc == 0 and doc["drifted"] == []
    keys = {"field", "kind", "n_a", "n_b", "distances", "errors", "method", "value", "threshold", "drifted",
            "checked", "note", "hist", "correction", "tests"}  # fmt: skip
    assert all(set(f) == keys for f in doc["fields"])
