"""The stats op in-process (``main(["stats", ...])``): accuracy vs numpy for any worker/unit layout,
bad records, options, fn, resume, overwrite and the output files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import orjson
import pytest
from tdp_testutil import run_op, write_jsonl
from test_e2e_stats import (
    BAD_LINES,
    FIELDS,
    check_field,
    first_seen,
    make_records,
    numbers,
    present,
    write_data,
)

from torchx_datapipes.errors import DatapipesError, OutputExistsError
from torchx_datapipes.stats import SCHEMA_VERSION

N = 6_000


def run_stats(inp: str, out: Path, *extra: str, fn: Optional[Callable[..., Any]] = None) -> Dict[str, Any]:
    return run_op("stats", inp, out, *extra, fn=fn)


def load(out: Path) -> Dict[str, Any]:
    return json.loads((out / "stats.json").read_text())


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, List[Dict[str, Any]], int]:
    root = tmp_path_factory.mktemp("stats_op")
    recs = make_records(N, seed=1)
    bad = write_data(root / "d", recs, nfiles=3)
    return root, recs, bad


@pytest.fixture(scope="module")
def layouts(data: tuple[Path, List[Dict[str, Any]], int]) -> Dict[str, Dict[str, Any]]:
    """One worker and whole files vs 2 workers and many small units vs 3 workers."""
    root, _, _ = data
    inp = str(root / "d/*.jsonl")
    docs = {}
    for name, extra in {
        "w1": ("--num_workers", "1"),
        "w2-small-units": ("--num_workers", "2", "--unit_mb", "0.05", "--batch_size", "100"),
        "w3": ("--num_workers", "3", "--unit_mb", "0.1", "--batch_size", "4096"),
    }.items():
        run_stats(inp, root / name, "--on_error", "skip", *extra)
        docs[name] = load(root / name)
    return docs


def test_layouts_match_numpy(
    layouts: Dict[str, Dict[str, Any]], data: tuple[Path, List[Dict[str, Any]], int]
) -> None:
    _, recs, bad = data
    for name, doc in layouts.items():
        assert doc["schema_version"] == SCHEMA_VERSION and doc["records"] == N, name
        assert doc["bad_records"] == bad and doc["records_in"] == N + bad, name
        assert list(doc["fields"]) == first_seen(recs), name
        for field in FIELDS:
            check_field(doc, recs, field)


def test_layouts_agree(layouts: Dict[str, Dict[str, Any]]) -> None:
    base = layouts["w1"]
    for name, doc in layouts.items():
        for field in ("id", "x", "y", "label"):
            a, b = base["fields"][field]["numeric"], doc["fields"][field]["numeric"]
            assert (a["count"], a["min"], a["max"], a["zeros"]) == (
                b["count"],
                b["min"],
                b["max"],
                b["zeros"],
            )
            for k in ("mean", "sum", "std_pop", "std_sample"):
                assert math.isclose(a[k], b[k], rel_tol=1e-9), (name, field, k)
        assert doc["fields"]["tag"]["string"]["top"] == base["fields"]["tag"]["string"]["top"], name


def test_bad_records_skip_raise_and_max_error_rate(
    tmp_path: Path, data: tuple[Path, List[Dict[str, Any]], int]
) -> None:
    root, _, bad = data
    path = tmp_path / "d/a.jsonl"
    write_jsonl(path, [{"v": 1.5}, {"v": None}, {"v": 2}])
    with path.open("ab") as f:
        f.write(b"".join(line.encode() + b"\n" for line in (*BAD_LINES, "not json", "{")))
    m = run_stats(str(path), tmp_path / "skip", "--on_error", "skip", "--max_error_rate", "1")
    doc = load(tmp_path / "skip")
    assert m["bad"] == doc["bad_records"] == len(BAD_LINES) + 2 and doc["records"] == 3
    assert doc["fields"]["v"]["numeric"]["nan"] == 0 and doc["fields"]["v"]["numeric"]["pos_inf"] == 0
    assert doc["fields"]["v"]["missing"] == 1 and doc["fields"]["v"]["numeric"]["mean"] == 1.75
    errors = (tmp_path / "skip/_errors").glob("*.jsonl")
    raws = [json.loads(x)["raw"] for p in errors for x in p.read_text().splitlines()]
    assert sorted(raws) == sorted([*BAD_LINES, "not json", "{"])
    with pytest.raises(Exception, match="JSONDecodeError|line"):
        run_stats(str(path), tmp_path / "raise")
    assert not (tmp_path / "raise/_SUCCESS").exists()
    with pytest.raises(DatapipesError, match="max_error_rate"):
        run_stats(str(path), tmp_path / "rate", "--on_error", "skip", "--max_error_rate", "0.5")
    assert not (tmp_path / "rate/_SUCCESS").exists()


def test_options(tmp_path: Path, data: tuple[Path, List[Dict[str, Any]], int]) -> None:
    root, recs, _ = data
    run_stats(
        str(root / "d/*.jsonl"), tmp_path / "o", "--on_error", "skip",
        *("--fields", "label,x,tag", "--quantiles", "0.1,0.5,0.9", "--top_k", "5", "--bins", "10"),
    )  # fmt: skip
    doc = load(tmp_path / "o")
    assert list(doc["fields"]) == ["label", "x", "tag"]  # a name the input lacks is refused (issue 22)
    assert doc["config"]["quantiles"] == [0.1, 0.5, 0.9] and doc["config"]["top_k"] == 5
    for field in ("label", "x", "tag"):
        check_field(doc, recs, field, top_k=5)
    x = doc["fields"]["x"]["numeric"]
    assert [q["q"] for q in x["quantiles"]] == [0.1, 0.5, 0.9]
    assert len(x["histogram"]["counts"]) == 10
    assert len(doc["fields"]["tag"]["string"]["top"]) == 5
    page = (tmp_path / "o/report.html").read_text()
    assert 'id="hist-x"' in page and 'id="bars-label"' in page and 'id="topk-tag"' in page
    assert 'id="hist-id"' not in page


def _featurize(rec: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    if rec["id"] % 7 == 0:
        return None
    if rec["id"] % 1000 == 1:
        raise ValueError("boom")
    y = rec.get("y")
    return {"lx": math.log(rec["x"]), "ly": math.log(y) if y is not None and y > 0 else float("nan")}


def test_fn_stats_of_transformed_records(
    tmp_path: Path, data: tuple[Path, List[Dict[str, Any]], int]
) -> None:
    root, recs, bad = data
    run_stats(
        str(root / "d/*.jsonl"), tmp_path / "fn", "--on_error", "skip", "--num_workers", "2", fn=_featurize
    )
    doc = load(tmp_path / "fn")
    feats, raised = [], 0
    for r in recs:
        try:
            f = _featurize(r)
        except ValueError:
            raised += 1
            continue
        if f is not None:
            feats.append(f)
    assert doc["records"] == len(feats) and doc["bad_records"] == bad + raised
    assert doc["filtered"] == sum(1 for r in recs if r["id"] % 7 == 0)
    assert list(doc["fields"]) == ["lx", "ly"]
    check_field(doc, feats, "lx")
    check_field(doc, feats, "ly")
    ly = doc["fields"]["ly"]["numeric"]
    assert ly["nan"] == int(np.isnan(numbers(present(feats, "ly"))).sum()) > 0
    assert ly["finite"] + ly["nan"] == ly["count"] == len(feats)


def test_non_object_records_and_empty_input(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d/a.jsonl", [{"a": 1}, 7, "s", [1, 2], None, {"a": "x"}])
    run_stats(str(tmp_path / "d/a.jsonl"), tmp_path / "o")
    doc = load(tmp_path / "o")
    assert doc["records"] == 6
    v = doc["fields"]["$value"]
    assert v["types"] == {"int": 1, "string": 1, "list": 1, "null": 1} and v["missing"] == 3
    assert doc["fields"]["a"]["types"] == {"int": 1, "string": 1} and doc["fields"]["a"]["missing"] == 4
    (tmp_path / "e").mkdir()
    (tmp_path / "e/empty.jsonl").write_bytes(b"")
    m = run_stats(str(tmp_path / "e/empty.jsonl"), tmp_path / "eo")
    doc = load(tmp_path / "eo")
    assert m["records_in"] == 0 and doc["records"] == 0 and doc["fields"] == {}
    assert (tmp_path / "eo/report.html").exists() and (tmp_path / "eo/stats.md").exists()


def test_overwrite_and_resume(tmp_path: Path, data: tuple[Path, List[Dict[str, Any]], int]) -> None:
    root, recs, _ = data
    inp, out = str(root / "d/*.jsonl"), tmp_path / "o"
    first = run_stats(inp, out, "--on_error", "skip", "--unit_mb", "0.1")
    doc = load(out)
    with pytest.raises(OutputExistsError, match="--overwrite True"):
        run_stats(inp, out, "--on_error", "skip", "--unit_mb", "0.1")
    # an interrupted job: _SUCCESS and stats.json gone, committed units (and their partials) stay
    (out / "_SUCCESS").unlink()
    (out / "stats.json").unlink()
    partials = sorted((out / "_units").glob("*.stats"))
    assert len(partials) == len(first["units"]) > 3
    mtimes = [p.stat().st_mtime_ns for p in partials]
    run_stats(inp, out, "--on_error", "skip", "--unit_mb", "0.1")
    assert [p.stat().st_mtime_ns for p in partials] == mtimes  # merged, not recomputed
    again = load(out)
    assert again["records"] == doc["records"] and list(again["fields"]) == list(doc["fields"])
    for field in FIELDS:  # sketch merges are randomised: exact parts equal, estimates within bounds
        check_field(again, recs, field)
        a, b = again["fields"][field], doc["fields"][field]
        assert (a["types"], a["missing"]) == (b["types"], b["missing"])
        if a["numeric"]:
            for k in ("count", "nan", "min", "max", "mean", "sum", "std_pop"):
                assert a["numeric"][k] == b["numeric"][k], (field, k)
    # different options change the fingerprint: with --overwrite every unit is recomputed
    run_stats(inp, out, "--on_error", "skip", "--unit_mb", "0.1", "--bins", "7", "--overwrite", "True")
    assert len(load(out)["fields"]["x"]["numeric"]["histogram"]["counts"]) == 7
    assert [p.stat().st_mtime_ns for p in partials] != mtimes


def test_stats_json_top_level(
    layouts: Dict[str, Dict[str, Any]], data: tuple[Path, List[Dict[str, Any]], int]
) -> None:
    root, _, _ = data
    doc = layouts["w1"]
    assert sorted(i["path"] for i in doc["inputs"]) == sorted(str(p) for p in (root / "d").glob("*.jsonl"))
    assert all(i["size"] > 0 for i in doc["inputs"])
    manifest = orjson.loads((root / "w1/_SUCCESS").read_bytes())
    assert manifest["op"] == "stats" and manifest["stats"].endswith("stats.json")
    assert manifest["records_described"] == doc["records"]
    for key in ("manifest_version", "op", "options", "versions"):  # the manifest fields in stats.json
        assert doc["manifest"][key] == manifest[key], key
    assert doc["manifest"]["num_workers"] == 1
