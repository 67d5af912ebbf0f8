"""The split component end to end through the real ``torchx run`` CLI on local_cwd."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from tdp_testutil import (
    canon,
    manifest,
    part_bytes,
    read_output,
    records,
    run_component,
    run_op,
    run_torchx,
    write_jsonl,
)

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.runner.main import main
from torchx_datapipes.split import largest_remainder, parse_fractions

pytestmark = pytest.mark.e2e

SPLITS = ("train", "val", "test")
FR = "train=0.8,val=0.1,test=0.1"


def split_args(
    out: str, j: str, port: int, *extra: str, inp: str = "data/*.jsonl", fr: str = FR
) -> list[str]:
    return [
        "run", "-s", "local_cwd", "torchx_datapipes.components:split", "--input", inp, "--output", out,
        "--fractions", fr, "-j", j, "--rdzv_port", str(port), "--unit_mb", "0.02", *extra,
    ]  # fmt: skip


def contents(out: Path) -> dict[str, list[Any]]:
    return {s: read_output(out, s) for s in SPLITS}


def all_bytes(out: Path) -> dict[str, dict[str, bytes]]:
    return {s: part_bytes(out, s) for s in SPLITS}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 files, 1,500 records plus 100 exact duplicates of earlier records (also across files)."""
    root = tmp_path_factory.mktemp("split_project")
    recs = records(1500)
    write_jsonl(root / "data/part-0.jsonl", recs[:600] + recs[:40])
    write_jsonl(root / "data/part-1.jsonl", recs[600:1100] + recs[500:530])
    write_jsonl(root / "data/part-2.jsonl", recs[1100:] + recs[1000:1030])
    return root


@pytest.fixture(scope="module")
def inputs(project: Path) -> list[dict[str, Any]]:
    return [
        json.loads(x) for p in sorted((project / "data").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def runs(project: Path) -> dict[str, Path]:
    """One real launch: exact+stratify at 2x2 with 2 workers per rank. In this process (one rank): the
    same exact job with default units, and hash (no key) with small units at 1, 2 and 4 workers."""
    extra = ("--method", "exact", "--stratify", "label", "--num_workers", "2")
    res = run_torchx(split_args("out/exact-2x2", "2x2", 29625, *extra), project)
    assert res.returncode == 0, res.stdout + res.stderr
    outs = {"exact-2x2": project / "out/exact-2x2"}
    for name, workers in (("hash-1x1", 1), ("hash-1w2", 2), ("hash-1w4", 4)):
        run_component(
            project, "split", input="data/*.jsonl", output=f"out/{name}", fractions=FR, j="1x1",
            num_workers=workers, unit_mb=0.02,
        )  # fmt: skip
        outs[name] = project / "out" / name
    # the same exact+stratify job: one rank, one worker, default units
    argv = ["split", "--input", str(project / "data/*.jsonl"), "--output", str(project / "out/exact-inproc")]
    main([*argv, "--fractions", FR, "--method", "exact", "--stratify", "label", "--progress_s", "0"])
    outs["exact-inproc"] = project / "out/exact-inproc"
    return outs


def test_disjoint_and_union_is_the_input_multiset(runs: dict[str, Path], inputs: list[Any]) -> None:
    for name in ("hash-1w2", "exact-2x2"):
        got = contents(runs[name])  # every input line exactly once, in exactly one split
        assert canon([r for v in got.values() for r in v]) == canon(inputs), name
        if name.startswith("hash"):  # and no record content in two splits (exact splits duplicates)
            keys = [set(canon(v)) for v in got.values()]
            assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2]), name
        m = manifest(runs[name])
        assert m["splits"] == {s: len(v) for s, v in got.items()} and m["records_in"] == len(inputs)


def test_identical_parts_for_every_world_size(runs: dict[str, Path]) -> None:
    base = all_bytes(runs["hash-1x1"])  # units of the input alone: the same parts for 1, 2 and 4 slots
    assert base["train"] and all_bytes(runs["hash-1w2"]) == base and all_bytes(runs["hash-1w4"]) == base
    exact = all_bytes(runs["exact-2x2"])
    assert set(exact["val"]) == {
        f"part-{i:05d}.jsonl" for i in range(len(manifest(runs["exact-2x2"])["units"]))
    }
    inproc = {s: b"".join(v.values()) for s, v in all_bytes(runs["exact-inproc"]).items()}
    assert {s: b"".join(v.values()) for s, v in exact.items()} == inproc  # same lines, same order
    assert manifest(runs["exact-2x2"])["world_size"] == 4


def test_duplicates_never_straddle_splits(runs: dict[str, Path]) -> None:
    where: dict[str, set[str]] = {}
    for s, recs in contents(runs["hash-1w4"]).items():
        for r in canon(recs):
            where.setdefault(r, set()).add(s)
    assert len(where) == 1500 and all(len(v) == 1 for v in where.values())


def test_exact_stratified_counts(runs: dict[str, Path], inputs: list[Any]) -> None:
    m = manifest(runs["exact-2x2"])
    fr = parse_fractions(FR)
    assert (m["method"], m["stratify"], m["fractions"]) == ("exact", "label", fr.as_dict())
    got = contents(runs["exact-2x2"])
    for c in range(3):
        want = largest_remainder(sum(1 for r in inputs if r["label"] == c), fr)
        assert tuple(m["classes"][str(c)].values()) == want
        assert tuple(sum(1 for r in got[s] if r["label"] == c) for s in SPLITS) == want
    totals = tuple(map(sum, zip(*(m["classes"][str(c)].values() for c in range(3)))))
    assert tuple(m["splits"].values()) == totals


def test_appending_a_file_moves_nothing(project: Path, runs: dict[str, Path]) -> None:
    (project / "more").mkdir()
    write_jsonl(project / "more/part-3.jsonl", records(400, start=1500))
    run_component(
        project, "split", input="data/*.jsonl,more/*.jsonl", output="out/appended", fractions=FR, j="1x1",
        num_workers=2, unit_mb=0.02,
    )  # fmt: skip
    before, after = contents(runs["hash-1w2"]), contents(project / "out/appended")
    for s in SPLITS:
        assert set(canon(before[s])) <= set(canon(after[s])), s
    assert sum(map(len, after.values())) == sum(map(len, before.values())) + 400


def test_bad_fractions_refused_before_launch(project: Path) -> None:
    res = run_torchx(split_args("out/bad", "1x1", 29628, fr="train=0.8,val=0.3"), project)
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1].strip()
    want = "split --fractions is not valid: invalid fractions 'train=0.8,val=0.3' (parsed as"
    assert last.startswith(want), last
    assert "sum to 1.1" in last and not (project / "out/bad").exists()


def test_missing_key_names_file_and_line(project: Path) -> None:
    with pytest.raises(DatapipesError) as info:
        run_component(
            project, "split", input="data/*.jsonl", output="out/nokey", fractions=FR, j="1x1", key="user_id",
            unit_mb=0.02,
        )  # fmt: skip
    text = str(info.value)
    # any file: units are claimed largest first, so which one fails first is not part-0 necessarily
    assert re.search(r"part-\d\.jsonl, line 1: cannot split: MissingKeyError", text), text[-3000:]
    assert "'user_id'" in text and not (project / "out/nokey/_SUCCESS").exists()


def with_group(rec: dict[str, Any]) -> Any:
    if rec["id"] % 7 == 0:
        return None
    return {**rec, "group": f"{rec['label']}-{rec['id'] // 30}"}


def test_hash_stratify_on_a_key_made_by_fn(project: Path, inputs: list[Any]) -> None:
    """hash + stratify on a key derived by fn, 2 workers (in this process: the launch is not the subject)."""
    out = project / "out/strat"
    extra = ("--key", "group", "--stratify", "label", "--num_workers", "2", "--unit_mb", "0.02")
    m = run_op("split", str(project / "data/*.jsonl"), out, "--fractions", FR, *extra, fn=with_group)
    kept = [{**r, "group": f"{r['label']}-{r['id'] // 30}"} for r in inputs if r["id"] % 7]
    got = [r for s in SPLITS for r in read_output(out, s)]
    assert canon(got) == canon(kept) and m["filtered"] == len(inputs) - len(kept)
    owner: dict[str, str] = {}
    for s in SPLITS:
        for r in read_output(out, s):
            assert owner.setdefault(r["group"], s) == s  # a key's records share a split
    for c in range(3):  # exact per class, except where a group of <= 10 straddles a cut (it stays whole)
        want = largest_remainder(sum(1 for r in kept if r["label"] == c), parse_fractions(FR))
        assert all(abs(a - b) <= 10 for a, b in zip(m["classes"][str(c)].values(), want))


def test_python_api(project: Path, inputs: list[Any]) -> None:
    script = project / "api_split.py"
    script.write_text(
        textwrap.dedent(
            """
            from torchx_datapipes import api

            if __name__ == "__main__":
                app = api.split(input="data/*.jsonl", output="out/api", fractions="a=0.5,b=0.5",
                                method="exact", j="1x2", fn=lambda r: {**r, "twice": r["id"] * 2})
                result = api.run(app)
                print("RESULT", result.state, result.manifest["splits"])
            """
        )
    )
    res = subprocess.run(
        [sys.executable, str(script)], cwd=project, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    n = len(inputs)
    assert f"RESULT SUCCEEDED {{'a': {n - n // 2}, 'b': {n // 2}}}" in res.stdout, res.stdout
    got = [r for s in ("a", "b") for r in read_output(project / "out/api", s)]
    assert canon(got) == canon([{**r, "twice": r["id"] * 2} for r in inputs])
