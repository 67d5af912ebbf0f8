"""Issue 22: schema inference and the validate op in-process (``main(["validate", ...])``).

Small real-shaped tables made here; each anomaly kind from a minimal case with its file and line."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.schema import Schema, SchemaError
from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.schema.validate import AnomaliesFoundError

SPECIES = ("Adelie", "Chinstrap", "Gentoo")


def penguins(n: int, seed: int = 0, shift: float = 0.0) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sp = rng.choice(SPECIES)
        rec: Dict[str, Any] = {
            "id": i,
            "species": sp,
            "bill_length_mm": round(rng.gauss(44 + shift, 5), 1),
            "body_mass_g": rng.randint(2700, 6300),
            "year": rng.choice((2007, 2008, 2009)),
            "vec": [rng.random(), rng.random(), rng.random()],
        }
        if rng.random() < 0.8:
            rec["sex"] = rng.choice(("male", "female"))
        out.append(rec)
    return out


def anomalies(out: Path) -> List[Dict[str, Any]]:
    return json.loads((out / "anomalies.json").read_text())  # type: ignore[no-any-return]


def by_kind(items: List[Dict[str, Any]]) -> Dict[tuple[str, str], Dict[str, Any]]:
    return {(a["field"], a["kind"]): a for a in items}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stats output of a 2,000-row table split over two files, and the schema inferred from it."""
    root = tmp_path_factory.mktemp("validate")
    recs = penguins(2000)
    write_jsonl(root / "train/a.jsonl", recs[:1200])
    write_jsonl(root / "train/b.jsonl", recs[1200:])
    run_op("stats", str(root / "train/*.jsonl"), root / "stats")
    assert schema_main(["infer", str(root / "stats"), "-o", str(root / "schema.json")]) == 0
    return root


def validate(root: Path, inp: str, out: str, *extra: str) -> Dict[str, Any]:
    return run_op("validate", inp, root / out, "--schema", str(root / "schema.json"), *extra)


def test_inferred_schema_follows_tfdv_rules(base: Path) -> None:
    schema = Schema.load(str(base / "schema.json"))
    f = schema.fields
    assert f["id"].id_like and f["id"].domain is None and not f["id"].drift
    assert (
        f["species"].domain == sorted(SPECIES) and f["species"].required and f["species"].min_fraction == 1.0
    )
    assert not f["sex"].required and 0.65 <= f["sex"].min_fraction <= 0.75  # 80% present, less 10% slack
    assert f["bill_length_mm"].type == ["float"] and f["bill_length_mm"].min is None  # no range by default
    assert f["vec"].type == ["list"] and f["vec"].shape == [3]
    assert not f["bill_length_mm"].allow_nan
    text = (base / "schema.json").read_text()
    assert json.loads(text)["fields"]["species"]["domain"] == sorted(SPECIES)  # plain, editable JSON


def test_schema_validates_its_own_table(base: Path) -> None:
    m = validate(base, str(base / "train/*.jsonl"), "self", "--baseline", str(base / "stats"))
    items = anomalies(base / "self")
    assert not [a for a in items if a["severity"] == "error"], items
    assert not [a for a in items if a["kind"] == "drift"], items  # the same data never drifts
    assert m["anomalies"] == len(items) and (base / "self/_SUCCESS").exists()
    assert (base / "self/report.html").exists() and (base / "self/stats.json").exists()


def test_each_anomaly_kind_with_file_and_line(base: Path) -> None:
    recs = penguins(300, seed=5)
    recs[3]["species"] = "Emperor"  # unexpected_values, line 4
    recs[7]["bill_length_mm"] = "n/a"  # type_mismatch, line 8
    del recs[11]["species"]  # missing_field, line 12
    recs[15]["wingspan"] = 1.0  # new_field, line 16
    recs[19]["vec"] = [0.5]  # shape_mismatch, line 20
    for r in recs:
        r.pop("sex", None)  # low_presence: 0% < min_fraction
    write_jsonl(base / "new/c.jsonl", recs[:100])
    write_jsonl(base / "new/d.jsonl", recs[100:])
    recs2 = penguins(50, seed=6)
    recs2[2]["species"] = "Emperor"
    write_jsonl(base / "new/d.jsonl", recs[100:] + recs2)
    with pytest.raises(AnomaliesFoundError) as e:
        validate(base, str(base / "new/*.jsonl"), "bad")
    got = by_kind(anomalies(base / "bad"))
    c, d = str(base / "new/c.jsonl"), str(base / "new/d.jsonl")

    def where(field: str, kind: str) -> List[tuple[str, int]]:
        return [(x["file"], x["line"]) for x in got[(field, kind)]["examples"]]

    assert where("species", "unexpected_values") == [(c, 4), (d, 203)]
    assert got[("species", "unexpected_values")]["values"] == {"Emperor": 2}
    assert "'Emperor' (2)" in got[("species", "unexpected_values")]["description"]
    assert where("bill_length_mm", "type_mismatch") == [(c, 8)]
    assert got[("bill_length_mm", "type_mismatch")]["examples"][0]["value"] == "n/a"
    assert where("species", "missing_field") == [(c, 12)]
    assert (
        where("wingspan", "new_field") == [(c, 16)]
        and got[("wingspan", "new_field")]["severity"] == "warning"
    )
    assert where("vec", "shape_mismatch") == [(c, 20)]
    assert got[("sex", "low_presence")]["severity"] == "error"
    msg = str(e.value)  # the job's error lists them, with an example location, and says what to do
    assert "unexpected_values" in msg and f"{c}:4" in msg and "anomalies.json" in msg
    for name in ("stats.json", "anomalies.json", "report.html"):
        assert (base / "bad" / name).exists(), name
    assert not (base / "bad/_SUCCESS").exists()
    for a in anomalies(base / "bad"):
        assert set(a) >= {"field", "kind", "severity", "description", "examples"} and len(a["examples"]) <= 5


def test_numeric_kinds_on_parquet_with_ranges(base: Path, tmp_path: Path) -> None:
    """nan_present and out_of_range through the Arrow path, against a schema with --ranges."""
    table = pa.table({"x": [1.0, 2.0, 3.0, 4.0], "k": ["a", "b", "a", "b"]})
    pq.write_table(table, tmp_path / "ok.parquet")
    run_op("stats", str(tmp_path / "ok.parquet"), tmp_path / "st")
    assert schema_main(["infer", str(tmp_path / "st"), "-o", str(tmp_path / "s.json"), "--ranges"]) == 0
    assert Schema.load(str(tmp_path / "s.json")).fields["x"].max == 4.0
    bad = pa.table({"x": [1.0, float("nan"), 9.0, 2.0, float("inf")], "k": ["a", "b", "c", "a", "b"]})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(AnomaliesFoundError):
        run_op(
            "validate", str(tmp_path / "bad.parquet"), tmp_path / "v", "--schema", str(tmp_path / "s.json")
        )
    got = by_kind(anomalies(tmp_path / "v"))
    f = str(tmp_path / "bad.parquet")
    assert [(x["file"], x["line"], x["value"]) for x in got[("x", "nan_present")]["examples"]] == [
        (f, 2, "NaN")
    ]
    assert [x["line"] for x in got[("x", "out_of_range")]["examples"]] == [3, 5]
    assert got[("k", "unexpected_values")]["values"] == {"c": 1}


def test_csv_text_in_a_number_column(base: Path, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n5,6\n")
    run_op("stats", str(tmp_path / "a.csv"), tmp_path / "st")
    schema_main(["infer", str(tmp_path / "st"), "-o", str(tmp_path / "s.json")])
    (tmp_path / "b.csv").write_text("x,y\n1,2\noops,4\n5,6\n")
    with pytest.raises(AnomaliesFoundError, match="b.csv:3"):
        run_op("validate", str(tmp_path / "b.csv"), tmp_path / "v", "--schema", str(tmp_path / "s.json"))
    got = by_kind(anomalies(tmp_path / "v"))
    assert [(x["line"], x["value"]) for x in got[("x", "type_mismatch")]["examples"]] == [(3, "oops")]


def test_record_count_and_fail_on(base: Path, tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(AnomaliesFoundError, match="record_count"):
        validate(base, str(tmp_path / "empty.jsonl"), "empty")
    assert by_kind(anomalies(base / "empty"))[("*", "record_count")]["severity"] == "error"
    # a warning only: passes at --fail_on error, fails at warning, and never fails at never
    recs = penguins(100, seed=9)
    recs[4]["extra"] = 1
    write_jsonl(tmp_path / "w.jsonl", recs)
    validate(base, str(tmp_path / "w.jsonl"), "w-error")
    assert (base / "w-error/_SUCCESS").exists()
    with pytest.raises(AnomaliesFoundError, match="new_field"):
        validate(base, str(tmp_path / "w.jsonl"), "w-warning", "--fail_on", "warning")
    recs[5]["species"] = "Emperor"
    write_jsonl(tmp_path / "e.jsonl", recs)
    validate(base, str(tmp_path / "e.jsonl"), "e-never", "--fail_on", "never")
    assert (base / "e-never/_SUCCESS").exists() and len(anomalies(base / "e-never")) == 2


def test_drift_from_baseline_is_an_anomaly(base: Path, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "shift.jsonl", penguins(2000, seed=3, shift=6.0))
    validate(base, str(tmp_path / "shift.jsonl"), "drift", "--baseline", str(base / "stats"))  # warning
    got = by_kind(anomalies(base / "drift"))
    d = got[("bill_length_mm", "drift")]
    assert d["severity"] == "warning" and d["method"] == "js" and d["value"] > d["threshold"]
    assert ("species", "drift") not in got and ("id", "drift") not in got  # id-like: never checked


def test_bad_schema_names_file_and_key(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"fields": {"x": {"type": "float", "requird": True}}}))
    with pytest.raises(SchemaError, match=r"s.json.fields\['x'\]: unknown key\(s\) requird"):
        Schema.load(str(p))
    p.write_text(json.dumps({"fields": {"x": {"type": "flaot"}}}))
    with pytest.raises(SchemaError, match="'flaot' is not a type"):
        Schema.load(str(p))


def test_python_api_builds_the_validate_app(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchx_datapipes import api

    monkeypatch.chdir(base)
    app = api.validate(str(base / "train/*.jsonl"), str(base / "api-out"), str(base / "schema.json"),
                       baseline=str(base / "stats"), fail_on="warning", j="1x1")  # fmt: skip
    cmd = app.roles[0].args[-1]
    assert " validate " in cmd and "--schema" in cmd and "--fail_on warning" in cmd and "--baseline" in cmd
    with pytest.raises(ValueError, match="fail_on must be one of error, warning, never"):
        api.validate(
            str(base / "train/*.jsonl"), str(base / "api-out"), str(base / "schema.json"), fail_on="x"
        )


def test_profile_guided_checks_find_what_a_full_check_finds(base: Path, tmp_path: Path) -> None:
    """The op walks only the columns its profile flags; a full record-by-record check agrees."""
    from torchx_datapipes.schema.check import RecordChecker

    rng = random.Random(11)
    recs = penguins(1500, seed=12)
    for i in rng.sample(range(1500), 40):
        kind = rng.randrange(6)
        r = recs[i]
        if kind == 0:
            r["species"] = rng.choice(("Emperor", "King"))
        elif kind == 1:
            r["body_mass_g"] = "heavy"
        elif kind == 2:
            r.pop("island", None)
            r.pop("year")
        elif kind == 3:
            r["vec"] = [1.0]
        elif kind == 4:
            r[f"new{rng.randrange(3)}"] = i
        else:
            r["bill_length_mm"] = None
    write_jsonl(tmp_path / "m.jsonl", recs)
    with pytest.raises(AnomaliesFoundError):
        run_op("validate", str(tmp_path / "m.jsonl"), tmp_path / "v", "--schema", str(base / "schema.json"),
               "--batch_size", "64")  # fmt: skip
    got = {(a["field"], a["kind"]): (a["count"], a["examples"]) for a in anomalies(tmp_path / "v")
           if a["kind"] not in ("low_presence", "drift", "record_count")}  # fmt: skip
    full = RecordChecker(Schema.load(str(base / "schema.json")))
    f = str(tmp_path / "m.jsonl")
    full.check_records(recs, lambda i: (f, i + 1))
    want = {(fk[0], fk[1]): (it["count"], it["examples"]) for fk, it in full.found.items.items()}
    assert got == want and len(want) >= 5


def test_a_failed_gate_reruns_into_the_same_output(base: Path, tmp_path: Path) -> None:
    """The CI-gate loop: validate fails, the data is fixed, the same command runs again: its own
    stats.json, anomalies.json and report.html are ours, not foreign entries to refuse."""
    recs = penguins(100, seed=3)
    recs[7]["species"] = "Emperor"
    write_jsonl(tmp_path / "d.jsonl", recs)
    with pytest.raises(AnomaliesFoundError, match="unexpected_values"):
        validate(base, str(tmp_path / "d.jsonl"), "gate", "--fail_on", "warning")
    assert (base / "gate/anomalies.json").exists() and not (base / "gate/_SUCCESS").exists()
    recs[7]["species"] = recs[6]["species"]
    write_jsonl(tmp_path / "d.jsonl", recs)
    validate(base, str(tmp_path / "d.jsonl"), "gate", "--fail_on", "warning", "--overwrite", "true")
    assert (base / "gate/_SUCCESS").exists() and anomalies(base / "gate") == []
