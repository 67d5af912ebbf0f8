"""The split op in-process (``main(["split", ...])``): every method, workers, fn, errors, manifest."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest
from tdp_testutil import canon, make_dataset, manifest, part_bytes, read_output, records, run_op, write_jsonl

from torchx_datapipes import components
from torchx_datapipes.errors import OutputExistsError
from torchx_datapipes.runner.badrecords import RecordError
from torchx_datapipes.split import assign_hash, hash_keys, largest_remainder, parse_fractions, parse_key

SPLITS = ("train", "val", "test")
FR = "train=0.8,val=0.1,test=0.1"
MODES = {
    "hash": ("--method", "hash", "--key", "id"),
    "hash-nokey": ("--method", "hash"),
    "exact": ("--method", "exact"),
    "hash-strat": ("--method", "hash", "--key", "id", "--stratify", "label"),
    "exact-strat": ("--method", "exact", "--stratify", "label"),
}


def split(inp: str, out: Path, *extra: str, fractions: str = FR, fn: Callable[..., Any] | None = None) -> Any:
    return run_op("split", inp, out, "--fractions", fractions, *extra, fn=fn)


def contents(out: Path, names: tuple[str, ...] = SPLITS) -> dict[str, list[Any]]:
    return {s: read_output(out, s) for s in names}


def all_bytes(out: Path, names: tuple[str, ...] = SPLITS) -> dict[str, dict[str, bytes]]:
    return {s: part_bytes(out, s) for s in names}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("split")
    return root, make_dataset(root / "d", [900, 700, 401])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_disjoint_union_and_workers_identical(
    tmp_path: Path, data: tuple[Path, list[dict[str, Any]]], mode: str
) -> None:
    root, recs = data
    inp = str(root / "d/*.jsonl")
    m1 = split(inp, tmp_path / "w1", *MODES[mode], "--unit_mb", "0.02", "--batch_size", "97")
    m2 = split(inp, tmp_path / "w3", *MODES[mode], "--unit_mb", "0.02", "--num_workers", "3")
    got = contents(tmp_path / "w1")
    ids = [{r["id"] for r in v} for v in got.values()]
    assert sum(len(x) for x in ids) == len(set().union(*ids)) == len(recs)  # disjoint, nothing lost
    assert canon([r for v in got.values() for r in v]) == canon(recs)  # union == input multiset
    assert all_bytes(tmp_path / "w1") == all_bytes(tmp_path / "w3")  # batch size and workers don't matter
    assert m1["splits"] == m2["splits"] == {s: len(v) for s, v in got.items()}
    assert m1["records_out"] == len(recs) and len(list((tmp_path / "w1/train").glob("part-*"))) > 3
    assert m1["options"]["method"] == MODES[mode][1] and m1["fractions"] == {
        "train": 0.8,
        "val": 0.1,
        "test": 0.1,
    }
    assert not (tmp_path / "w1/_split").exists()
    if mode.startswith("exact"):
        assert not mode.endswith("strat") or m1["classes"]
    if mode == "exact":
        assert tuple(m1["splits"].values()) == largest_remainder(len(recs), parse_fractions(FR))
    if "strat" in mode:
        for c, row in m1["classes"].items():
            n = sum(1 for r in recs if str(r["label"]) == c)
            assert tuple(row.values()) == largest_remainder(n, parse_fractions(FR)), c
            assert row == {s: sum(1 for r in got[s] if str(r["label"]) == c) for s in SPLITS}


def test_hash_matches_library_and_binomial_100k(tmp_path: Path) -> None:
    n = 100_000
    write_jsonl(tmp_path / "d/a.jsonl", [{"id": i} for i in range(n)])
    m = split(str(tmp_path / "d/a.jsonl"), tmp_path / "o", "--key", "id", "--seed", "7")
    fr = parse_fractions(FR)
    for s, f in zip(SPLITS, fr.values):
        assert abs(m["splits"][s] - n * f) <= 4 * math.sqrt(n * f * (1 - f)), (s, m["splits"])
    want = assign_hash(hash_keys([{"id": i} for i in range(n)], parse_key("id"), 7), fr)
    got = contents(tmp_path / "o")
    for k, s in enumerate(SPLITS):
        assert sorted(r["id"] for r in got[s]) == [i for i in range(n) if want[i] == k]


def test_append_keeps_assignments_and_duplicates_stay_together(tmp_path: Path) -> None:
    base = records(500)
    dups = base[:50] * 3
    write_jsonl(tmp_path / "d/a.jsonl", base + dups)
    split(str(tmp_path / "d/*.jsonl"), tmp_path / "o1")  # no key: the whole record is the key
    write_jsonl(tmp_path / "d/b.jsonl", records(300, start=500) + base[:20])
    split(str(tmp_path / "d/*.jsonl"), tmp_path / "o2")
    before = {s: canon(v) for s, v in contents(tmp_path / "o1").items()}
    after = {s: canon(v) for s, v in contents(tmp_path / "o2").items()}
    where: dict[str, set[str]] = {}
    for s in SPLITS:
        for r in after[s]:
            where.setdefault(r, set()).add(s)
        assert set(before[s]) <= set(after[s])  # nothing moved
    assert all(len(v) == 1 for v in where.values())  # duplicates never straddle splits


def test_stratified_small_classes_warned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = [{"id": i, "y": "common"} for i in range(100)] + [
        {"id": 100, "y": "rare"},
        {"id": 101, "y": "rare"},
    ]
    write_jsonl(tmp_path / "d/a.jsonl", recs)
    m = split(str(tmp_path / "d/a.jsonl"), tmp_path / "o", "--method", "exact", "--stratify", "y")
    assert m["classes"]['"rare"'] == {"train": 2, "val": 0, "test": 0}
    assert m["classes"]['"common"'] == {"train": 80, "val": 10, "test": 10}
    assert len(m["warnings"]) == 1 and '"rare"' in m["warnings"][0]
    assert "warning:" in capsys.readouterr().err and m == manifest(tmp_path / "o") | {}


def test_fn_applies_in_both_passes(tmp_path: Path, data: tuple[Path, list[dict[str, Any]]]) -> None:
    root, recs = data

    def fn(r: dict[str, Any]) -> Any:
        return None if r["id"] % 5 == 0 else {**r, "group": r["id"] // 10}

    for mode in ("hash", "exact-strat"):
        extra = ("--key", "group") if mode == "hash" else MODES[mode]
        m = split(str(root / "d/*.jsonl"), tmp_path / mode, *extra, "--num_workers", "2", fn=fn)
        kept = [fn(r) for r in recs if fn(r) is not None]
        got = contents(tmp_path / mode)
        assert canon([r for v in got.values() for r in v]) == canon(kept)
        assert m["filtered"] == len(recs) - len(kept) and m["records_out"] == len(kept)
        if mode == "hash":  # a derived key keeps groups together
            owner = {r["group"]: s for s in SPLITS for r in got[s]}
            assert all(owner[r["group"]] == s for s in SPLITS for r in got[s])
        else:
            assert tuple(m["splits"].values()) == tuple(
                map(sum, zip(*(largest_remainder(sum(1 for r in kept if r["label"] == c), parse_fractions(FR))
                               for c in range(3))))
            )  # fmt: skip


def _with_missing(tmp_path: Path, broken: bool = True) -> str:
    recs: list[Any] = records(40)
    del recs[6]["label"], recs[30]["label"]
    recs[12] = {"no_id": True, "label": 1}
    f = write_jsonl(tmp_path / "d/m.jsonl", recs)
    if broken:  # a parse error too, after the missing keys
        with f.open("ab") as fh:
            fh.write(b"{broken\n")
    return str(f)


@pytest.mark.parametrize("mode", ["hash", "exact-strat", "hash-strat"])
def test_missing_key_raise_names_file_and_line(tmp_path: Path, mode: str) -> None:
    inp = _with_missing(tmp_path, broken=False)  # a batch's parse errors are reported first
    with pytest.raises(RecordError) as e:
        split(inp, tmp_path / "o", *MODES[mode])
    msg = str(e.value)
    line = 13 if mode == "hash" else 7
    field = "'id'" if mode == "hash" else "'label'"
    assert f"m.jsonl, line {line}: cannot split: MissingKeyError" in msg and field in msg, msg
    assert "--on_error skip" in msg


@pytest.mark.parametrize("mode", ["hash", "exact-strat", "hash-strat"])
def test_missing_key_skip_routes_to_errors(tmp_path: Path, mode: str) -> None:
    inp = _with_missing(tmp_path)
    m = split(inp, tmp_path / "o", *MODES[mode], "--on_error", "skip", "--batch_size", "8")
    errs = [json.loads(x) for p in (tmp_path / "o/_errors").glob("*") for x in p.read_text().splitlines()]
    got = sorted((e["line"], e["stage"]) for e in errs)
    want = (
        [(13, "split"), (41, "parse")]
        if mode == "hash"
        else [(7, "split"), (13, "split"), (31, "split"), (41, "parse")]
    )
    if mode == "exact-strat":  # exact ignores --key, so the record without "id" is fine
        want.remove((13, "split"))
    assert got == want
    assert m["bad"] == len(want) and m["records_out"] == 40 - (len(want) - 1)
    assert sum(len(v) for v in contents(tmp_path / "o").values()) == m["records_out"]
    assert [p.name for p in (tmp_path / "o/_errors").glob("*")] == ["part-00000.jsonl"]  # none from counting


def test_bad_fractions_and_options(tmp_path: Path, data: tuple[Path, list[dict[str, Any]]]) -> None:
    root, _ = data
    with pytest.raises(ValueError, match=r"invalid fractions 'train=0.8,val=0.3' \(parsed as"):
        components.split(input=str(root / "d"), output=str(tmp_path / "o"), fractions="train=0.8,val=0.3")
    with pytest.raises(ValueError, match="invalid fractions"):
        split(str(root / "d"), tmp_path / "o", fractions="train=0.5")
    m = split(str(root / "d"), tmp_path / "o", "--seed", "3", "--key", "id,label")
    assert (m["seed"], m["key"], m["method"], m["stratify"]) == (3, ["id", "label"], "hash", None)
    with pytest.raises(OutputExistsError):
        split(str(root / "d"), tmp_path / "o", "--seed", "4")
    m2 = split(str(root / "d"), tmp_path / "o", "--seed", "4", "--overwrite")
    assert m2["options"]["seed"] == 4 and m2["splits"] != m["splits"]


def test_parquet_output(tmp_path: Path, data: tuple[Path, list[dict[str, Any]]]) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    root, recs = data
    m = split(str(root / "d"), tmp_path / "o", "--output_format", "parquet", "--method", "exact")
    n = {
        s: sum(pq.read_table(p).num_rows for p in (tmp_path / "o" / s).glob("part-*.parquet")) for s in SPLITS
    }
    assert n == m["splits"] and sum(n.values()) == len(recs)


def test_meta_records_are_json(tmp_path: Path, data: tuple[Path, list[dict[str, Any]]]) -> None:
    root, _ = data
    m = split(str(root / "d"), tmp_path / "o", *MODES["hash-strat"])
    unit = m["units"][0]
    assert set(unit["counts"]) == set(SPLITS) and unit["outputs"][0].startswith("train/part-")
    assert orjson.loads(orjson.dumps(unit)) == unit
