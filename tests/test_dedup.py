"""The dedup op (issue 30) end to end: the distributed passes against the library and brute force.

The corpus is ``test_dedup_core.make_corpus`` (near-duplicate variants, chains, exact copies,
case variants, short and empty texts) written round-robin into three JSON Lines files, so the
input order (files sorted, then lines) differs from the generation order. Most runs are
in-process (``runner.main``, one or two worker slots); one real ``torchx run -s local_cwd -j 1x2``
launch is shared by the module, and one torchrun job has a rank SIGKILLed mid-exchange
(``dedup_kill_worker.py``) and restarted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from tdp_testutil import manifest, output_files, part_bytes, read_output, run_op, run_torchx
from test_dedup_core import (
    NGRAM,
    THRESHOLD,
    bf_decontam,
    bf_jaccard,
    make_corpus,
    near_pairs,
    verified_edges,
)

from torchx_datapipes import api, components, ops
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.dedup import DedupCounts, label_components, union_find
from torchx_datapipes.errors import DatapipesError, OutputExistsError
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.ops import SPECS
from torchx_datapipes.options.spec import OptionError
from torchx_datapipes.runner import exchange
from torchx_datapipes.runner.badrecords import RecordError
from torchx_datapipes.runner.dedup_graph import Graph

FILES = 3
SMALL_UNITS = ("--unit_mb", "0.04")  # ~9 units over the three files: units split files mid-way


def stable(file: int, line: int) -> int:
    return (file << 40) | line


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The input files and, in input order, each record's text and stable id."""
    root = tmp_path_factory.mktemp("dedup")
    docs = make_corpus()[0]
    files: list[list[dict[str, Any]]] = [[] for _ in range(FILES)]
    for i, d in enumerate(docs):
        files[i % FILES].append({"doc": i, "text": d, "meta": {"n": i % 7}})
    (root / "in").mkdir()
    for k, recs in enumerate(files):
        with open(root / "in" / f"f{k}.jsonl", "wb") as fh:
            fh.write(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    order = [(stable(k, line), r) for k, recs in enumerate(files) for line, r in enumerate(recs, 1)]
    return {"root": root, "input": str(root / "in" / "*.jsonl"), "order": order}


def reference(texts: list[str]) -> tuple[dict[int, int], int, int, dict[tuple[int, int], float]]:
    """The library in one process over positions in input order: labels, #candidates, #verified, Jaccards."""
    cand, rows = near_pairs(texts, list(range(len(texts))))
    edges = verified_edges(cand, rows)
    labels, _ = label_components([edges])
    truth = bf_jaccard(texts, NGRAM)
    return labels, len(cand), len(edges), truth


def dedup(c: dict[str, Any], out: Path, *extra: str) -> dict[str, Any]:
    return run_op("dedup", c["input"], out, *SMALL_UNITS, *extra)


def duplicates(out: Path) -> list[dict[str, Any]]:
    rows = []
    for p in sorted((out / "_dedup").glob("duplicates-*.jsonl")):
        rows += [json.loads(line) for line in p.read_text().splitlines()]
    return rows


def test_exchange_spills_by_partition_and_gathers_committed_files_only(tmp_path: Path) -> None:
    import numpy as np

    stage = exchange.Stage(str(tmp_path), "t", 3, (("key", "<u8"), ("id", "<i8")))
    metas = []
    for u in range(4):
        keys = np.arange(u * 10, u * 10 + 10, dtype=np.uint64)
        cols = {"key": keys, "id": keys.astype(np.int64)}
        spilled = stage.spill(f"u-{u:05d}", exchange.partition_of(keys, 3), cols)
        metas.append({ms.FILES: [f.to_json() for f in spilled]})
    stray = tmp_path / "_exchange" / "t" / "p-00000" / "u-99999.bin"  # e.g. left by another job
    stray.write_bytes((tmp_path / stage.rel(0, "u-00000")).read_bytes())
    files = stage.files(metas[::-1])  # producer order is the files' names, not the records' order
    got = [stage.gather(p, files) for p in range(3)]
    every = np.sort(np.concatenate([g["key"] for g in got]))
    assert every.tolist() == list(range(40))  # each row once, the stray file not read
    for p, g in enumerate(got):
        assert (exchange.partition_of(g["key"], 3) == p).all()
        assert (g["id"] == g["key"].astype(np.int64)).all()
    assert [t.index for t in stage.tasks()] == [0, 1, 2]
    bad = tmp_path / stage.rel(1, "u-00002")
    bad.write_bytes(bad.read_bytes()[:-3])
    with pytest.raises(DatapipesError, match=r"u-00002\.bin holds .* bytes.*relaunch"):
        stage.gather(1, files)


@pytest.mark.parametrize("gap", [0, 5, 10**9])
def test_shingle_rows_read_by_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gap: int) -> None:
    """Any set of ids gives their exact rows, whether neighbours share a range read or not."""
    import numpy as np

    from torchx_datapipes.runner import shingle_rows as sr

    monkeypatch.setattr(sr, "GAP_VALUES", gap)
    if gap == 5:
        monkeypatch.setattr(sr, "INDEX_BUDGET", 1)  # every unit index dropped but the newest
    rng = np.random.default_rng(7)
    want: dict[int, list[int]] = {}
    for u in (0, 3):
        ids = (np.int64(u) << np.int64(32)) | np.sort(rng.choice(1000, 60, replace=False)).astype(np.int64)
        sizes = rng.integers(0, 9, len(ids)).tolist()
        rows = [np.unique(rng.integers(0, 2**63, n, dtype=np.uint64)) for n in sizes]
        lens = np.array([len(r) for r in rows], dtype=np.int64)
        values = np.concatenate(rows).astype(np.uint64)
        exchange.write_columns(str(tmp_path), sr.shingle_rel(u), {"id": ids, "len": lens, "values": values})
        want.update({int(i): r.tolist() for i, r in zip(ids, rows)})
    reader = sr.ShingleRows(str(tmp_path))
    for ask in (list(want), [k for k in want if k % 3 == 0], [max(want)]):
        got = reader.rows(np.array(ask[::-1] + ask[:2], dtype=np.int64))  # any order, repeats
        assert {k: v.tolist() for k, v in got.items()} == {k: want[k] for k in ask}
    assert len(reader._index) == (1 if gap == 5 else 2)
    with pytest.raises(DatapipesError, match="lacks ids"):
        reader.rows(np.array([(3 << 32) | 5000], dtype=np.int64))
    cut = tmp_path / sr.shingle_rel(3)
    cut.write_bytes(cut.read_bytes()[:-8])
    with pytest.raises(DatapipesError, match=r"u-00003\.bin holds .* bytes.*relaunch"):
        sr.ShingleRows(str(tmp_path)).rows(np.array([max(want)], dtype=np.int64))


@pytest.fixture(scope="module")
def near_drop(corpus: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("near") / "out"
    dedup(corpus, out)
    return out


def test_near_drop_equals_the_library_and_brute_force(corpus: dict[str, Any], near_drop: Path) -> None:
    order = corpus["order"]
    texts = [r["text"] for _, r in order]
    labels, n_cand, n_edges, truth = reference(texts)
    # the keep rule: each component's first record in input order; the parts hold exactly those
    want_kept = [r for k, (_, r) in enumerate(order) if labels.get(k, k) == k]
    assert read_output(near_drop) == want_kept  # in input order, records unchanged
    table = duplicates(near_drop)
    pos = {sid: k for k, (sid, _) in enumerate(order)}
    got = {pos[d["id"]]: (pos[d["kept_id"]], d["jaccard"]) for d in table}
    assert {k: rep for k, (rep, _) in got.items()} == {k: v for k, v in labels.items() if v != k}
    for k, (rep, jac) in got.items():  # the Jaccard of each removed record with its kept record
        assert jac == pytest.approx(truth.get((rep, k), 0.0), abs=1e-12)
    d0 = table[0]
    assert d0["file"].endswith(f"f{d0['id'] >> 40}.jsonl") and d0["line"] == d0["id"] & ((1 << 40) - 1)
    # brute force: precision 1 (every removed record is truly in its kept record's cluster), recall
    brute = union_find([p for p, s in truth.items() if s >= THRESHOLD])
    removed_bf = {k for k, v in brute.items() if v != k}
    assert all(brute.get(k, k) == brute.get(rep, rep) for k, (rep, _) in got.items())
    recall = len(set(got) & removed_bf) / len(removed_bf)
    print(f"\n{len(texts)} records, removed {len(got)}, brute force {len(removed_bf)}, recall {recall:.3f}")
    assert recall >= 0.95 and len(got) > 100
    # the counts: those of the library, and the schema's keys
    m = manifest(near_drop)
    counts = DedupCounts.from_labels(len(texts), n_cand, n_edges, labels).as_manifest()
    assert {k: m[ms.DEDUP][k] for k in counts} == counts
    assert m[ms.RECORDS_OUT] == len(want_kept) and m[ms.RECORDS_IN] == len(texts)
    always, optional = ops.manifest_keys("dedup")
    assert always <= set(m) <= always | optional
    assert not (near_drop / "_exchange").exists()  # the spill files are gone after the commit
    page = (near_drop / "report.html").read_text()
    biggest = m[ms.DEDUP]["largest_clusters"][0]
    assert m[ms.REPORT] == str(near_drop / "report.html") and "duplicate fraction" in page
    assert f"{biggest['size']} records, kept {biggest['file']}:{biggest['line']}" in page
    assert (
        sum(int(n) * int(s) for s, n in m[ms.DEDUP]["cluster_sizes"].items())
        == m[ms.DEDUP]["removed"] + m[ms.DEDUP]["clusters"]
    )


def test_commit_records_have_the_documented_keys(near_drop: Path) -> None:
    kinds = {"map": "dedup_map", "pairs": "dedup_pairs", "verify": "dedup_verify", "route": "dedup_route",
             "sizes": "dedup_sizes"}  # fmt: skip
    seen = set()
    for p in (near_drop / "_units").glob("*.json"):
        parts = p.name.split(".")
        name = parts[1] if len(parts) == 3 else "main"
        kind = "dedup" if name == "main" else kinds.get(name) or f"dedup_{name.rstrip('0123456789')}"
        always, optional = ops.record_keys(kind)
        got = set(orjson.loads(p.read_bytes()))
        assert always <= got <= always | optional, (p.name, sorted(got ^ always))
        seen.add(kind)
    assert seen == {"dedup", *kinds.values(), "dedup_cc", "dedup_lab"}


def test_same_bytes_for_any_workers_and_partitions(
    corpus: dict[str, Any], near_drop: Path, tmp_path: Path
) -> None:
    """-j 1x1 (near_drop) against two worker slots claiming dynamically, and other partition counts."""
    base = output_files(near_drop)
    assert any(k.startswith("_dedup/") for k in base) and any(k.startswith("part-") for k in base)
    for name, extra in (("w2", ("--num_workers", "2")), ("p7", ("--num_workers", "2", "--partitions", "7"))):
        dedup(corpus, tmp_path / name, *extra)
        assert output_files(tmp_path / name) == base, name


def test_exact_keeps_the_first_of_identical_values(corpus: dict[str, Any], tmp_path: Path) -> None:
    m = dedup(corpus, tmp_path / "x", "--method", "exact")
    first: dict[str, int] = {}
    want = []
    for sid, r in corpus["order"]:
        if r["text"] not in first:
            first[r["text"]] = sid
            want.append(r)
    assert read_output(tmp_path / "x") == want
    assert {(d["id"], d["kept_id"], d["jaccard"]) for d in duplicates(tmp_path / "x")} == {
        (sid, first[r["text"]], 1.0) for sid, r in corpus["order"] if first[r["text"]] != sid
    }
    assert m[ms.DEDUP]["removed"] == len(corpus["order"]) - len(want) > 0


def test_annotate_then_split_keeps_every_cluster_in_one_split(corpus: dict[str, Any], tmp_path: Path) -> None:
    m = dedup(corpus, tmp_path / "a", "--action", "annotate")
    got = read_output(tmp_path / "a")
    order = corpus["order"]
    assert [{k: v for k, v in r.items() if k != "dedup_cluster"} for r in got] == [r for _, r in order]
    labels = reference([r["text"] for _, r in order])[0]
    assert [r["dedup_cluster"] for r in got] == [order[labels.get(k, k)][0] for k in range(len(order))]
    assert m[ms.RECORDS_OUT] == len(order) and not (tmp_path / "a" / "_dedup").exists()
    run_op("split", str(tmp_path / "a" / "part-*.jsonl"), tmp_path / "s", "--key", "dedup_cluster")
    where: dict[int, set[str]] = {}
    for s in ("train", "val", "test"):
        for r in read_output(tmp_path / "s", s):
            where.setdefault(r["dedup_cluster"], set()).add(s)
    assert sum(1 for v in where.values() if len(v) > 1) == 0
    assert sum(1 for c in where if sum(r["dedup_cluster"] == c for r in got) > 1) == m[ms.DEDUP]["clusters"]


def test_kill_mid_exchange_then_relaunch_resumes(
    corpus: dict[str, Any], near_drop: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that dies in the first label propagation pass (after map, pairs and verify committed)."""
    out = tmp_path / "k"
    original = Graph.propagate_task

    def die(self: Graph, *a: Any) -> Any:
        raise RuntimeError("killed mid-exchange")

    monkeypatch.setattr(Graph, "propagate_task", die)
    with pytest.raises(RuntimeError, match="killed mid-exchange"):
        dedup(corpus, out, "--num_workers", "2")
    spilled = sorted(p.relative_to(out).parts[1] for p in (out / "_exchange").glob("*/*/*.bin"))
    assert {"bands", "cand", "edges"} <= set(spilled) and not (out / "_SUCCESS").exists()
    committed = {p.name: p.read_bytes() for p in (out / "_units").glob("*.json")}
    assert {n.split(".")[1] for n in committed} == {"map", "pairs", "verify"}  # then it died
    monkeypatch.setattr(Graph, "propagate_task", original)
    (out / "_dedup").mkdir()
    (out / "_dedup" / "duplicates-00042.jsonl").write_text("{}\n")  # as an earlier, different job left it
    dedup(corpus, out)
    assert output_files(out) == output_files(near_drop)
    for name, data in committed.items():  # the committed tasks were skipped, not redone
        assert (out / "_units" / name).read_bytes() == data, name


def test_without_verification_every_candidate_is_an_edge(corpus: dict[str, Any], tmp_path: Path) -> None:
    m = dedup(corpus, tmp_path / "nv", "--verify", "false")[ms.DEDUP]
    texts = [r["text"] for _, r in corpus["order"]]
    _, n_cand, n_edges, _ = reference(texts)
    assert m["candidate_pairs"] == m["verified_pairs"] == n_cand > n_edges
    assert m["false_positive_rate"] == 0.0 and m["removed"] > len(duplicates_of_reference(texts))


def duplicates_of_reference(texts: list[str]) -> list[int]:
    labels = reference(texts)[0]
    return [k for k, v in labels.items() if v != k]


def drop_every_fifth(r: dict[str, Any]) -> Any:
    return None if r["doc"] % 5 == 0 else {**r, "seen": True}


def test_fn_maps_or_filters_first(corpus: dict[str, Any], tmp_path: Path) -> None:
    m = run_op("dedup", corpus["input"], tmp_path / "f", *SMALL_UNITS, fn=drop_every_fifth)
    kept = [(sid, {**r, "seen": True}) for sid, r in corpus["order"] if r["doc"] % 5]
    labels = reference([r["text"] for _, r in kept])[0]
    assert read_output(tmp_path / "f") == [r for k, (_, r) in enumerate(kept) if labels.get(k, k) == k]
    assert m[ms.FILTERED] == len(corpus["order"]) - len(kept)
    with pytest.raises(DatapipesError, match="--fn returned several records for one input record"):
        run_op("dedup", corpus["input"], tmp_path / "g", fn=lambda r: [r, r])


def test_records_without_the_field(corpus: dict[str, Any], tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    recs = [
        {"text": "one two three four five six"},
        {"body": "no text"},
        {"text": "one two three four five six"},
    ]
    (bad / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(
        RecordError, match=r"a\.jsonl, line 2: dedup raised ValueError: the record has no field 'text'"
    ):
        run_op("dedup", str(bad / "a.jsonl"), tmp_path / "o1")
    m = run_op(
        "dedup", str(bad / "a.jsonl"), tmp_path / "o2", "--on_error", "skip", "--max_error_rate", "0.5"
    )
    assert read_output(tmp_path / "o2") == recs[:1] and m[ms.BAD] == 1 and m[ms.DEDUP]["removed"] == 1
    (err,) = [
        json.loads(x) for p in (tmp_path / "o2" / "_errors").glob("*") for x in p.read_text().splitlines()
    ]
    assert err["line"] == 2 and "--field" in err["error"]
    with pytest.raises(OutputExistsError, match="--overwrite"):
        run_op(
            "dedup", str(bad / "a.jsonl"), tmp_path / "o2", "--on_error", "skip", "--max_error_rate", "0.5"
        )


@pytest.mark.parametrize("n", [13, 6])
def test_decontaminate_equals_brute_force(corpus: dict[str, Any], tmp_path: Path, n: int) -> None:
    """References: sentences of the corpus's pool, spans of its documents, short texts; two files."""
    import random

    docs, pool = make_corpus()
    rng = random.Random(n)
    refs = [rng.choice(pool) for _ in range(25)] + ["Hello world", "completely unrelated words only here"]
    refs += [" ".join(d.split()[10:30]) for d in rng.sample(docs, 5)]
    (tmp_path / "ref").mkdir()
    halves = [refs[: len(refs) // 2], refs[len(refs) // 2 :]]
    for k, half in enumerate(halves):  # the reference field differs from the input's
        (tmp_path / "ref" / f"r{k}.jsonl").write_text("".join(json.dumps({"q": t}) + "\n" for t in half))
    ref_ids = [stable(k, line) for k, half in enumerate(halves) for line in range(1, len(half) + 1)]
    out = tmp_path / "d"
    extra = (
        "--reference",
        str(tmp_path / "ref"),
        "--reference_field",
        "q",
        "--ngram",
        str(n),
        "--num_workers",
        "2",
    )
    m = run_op("decontaminate", corpus["input"], out, *SMALL_UNITS, *extra)
    order = corpus["order"]
    want = bf_decontam(refs, [r["text"] for _, r in order], n)
    assert read_output(out) == [r for (_, r), w in zip(order, want) if w is None]
    rows = [
        json.loads(x) for p in sorted((out / "_dedup").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]
    got = {d["id"]: (d["reference_id"], d["ngram"], d["shared"]) for d in rows}
    assert got == {sid: (ref_ids[w[0]], w[1], w[2]) for (sid, _), w in zip(order, want) if w is not None}
    assert all(d["reference_file"].endswith(f"r{d['reference_id'] >> 40}.jsonl") for d in rows)
    removed = sum(w is not None for w in want)
    assert 0 < removed < len(order) and m[ms.DECONTAMINATE][ms.REMOVED] == removed
    assert m[ms.DECONTAMINATE]["reference_records"] == len(refs) and not (out / "_exchange").exists()
    always, optional = ops.manifest_keys("decontaminate")
    assert always <= set(m) <= always | optional


@pytest.mark.parametrize(
    "values, expect",
    [
        ({"method": "nearr"}, "--method"),
        ({"threshold": 1.0}, "--threshold"),
        ({"action": "annotated"}, "--action"),
        ({"ngram": 0}, "--ngram"),
        ({"partitions": -1}, "--partitions"),
    ],
)
def test_option_typos_are_refused_in_one_line(values: dict[str, Any], expect: str) -> None:
    with pytest.raises(OptionError) as e:
        SPECS["dedup"].check({"input": "x.jsonl", "output": "out", **values})
    assert expect in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def torchx_job(corpus: dict[str, Any]) -> Path:
    """One real launch: ``torchx run -s local_cwd datapipes.dedup -j 1x2`` (two ranks, dynamic claims)."""
    root: Path = corpus["root"]
    args = ["run", "-s", "local_cwd", "datapipes.dedup", "--input", "in/*.jsonl", "--output", "out/1x2",
            "-j", "1x2", *SMALL_UNITS]  # fmt: skip
    res = run_torchx(args, root)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    return root / "out" / "1x2"


def test_two_ranks_write_the_same_bytes(torchx_job: Path, near_drop: Path) -> None:
    m = manifest(torchx_job)
    assert m[ms.WORLD_SIZE] == 2 and m[ms.OP] == "dedup"
    assert output_files(torchx_job) == output_files(near_drop)  # -j 1x2 against one in-process rank
    assert part_bytes(torchx_job) == part_bytes(near_drop)


@pytest.mark.parametrize("name", ["dedup", "decontaminate"])
def test_components_pass_the_torchx_linter(name: str) -> None:
    from torchx.components.component_test_base import ComponentTestCase

    class Case(ComponentTestCase):
        def runTest(self) -> None:  # pragma: no cover - unittest plumbing
            pass

    case = Case()
    case.setUp()
    try:
        case.validate(components, name)
    finally:
        case.tearDown()


@pytest.mark.parametrize(
    "op, kwargs, needle",
    [
        ("dedup", {"method": "nearr"}, "dedup --method must be one of near, exact; got 'nearr'"),
        ("dedup", {"threshold": 1.5}, "dedup --threshold must be in (0, 1)"),
        ("decontaminate", {}, "decontaminate: --reference is required"),
        ("decontaminate", {"reference": "nope/*.jsonl"}, "decontaminate --reference: input pattern 'nope/"),
        ("decontaminate", {"reference": "in/f2.jsonl", "ngram": 0}, "decontaminate --ngram must be >= 1"),
    ],
)
def test_components_refuse_bad_options_before_launch(
    corpus: dict[str, Any], monkeypatch: pytest.MonkeyPatch, op: str, kwargs: dict[str, Any], needle: str
) -> None:
    monkeypatch.chdir(corpus["root"])
    with pytest.raises(InvalidArgumentError) as e:
        getattr(components, op)(input="in/*.jsonl", output="out/x", **kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_api_builds_the_same_job_as_the_component(
    corpus: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(corpus["root"])
    got = api.dedup("in/*.jsonl", "out/api", method="exact", j="1x1")
    want = components.dedup(input="in/*.jsonl", output="out/api", method="exact", j="1x1")
    assert got.roles[0].args == want.roles[0].args
    dc = api.decontaminate(["in/f0.jsonl", "in/f1.jsonl"], "out/dc", reference="in/f2.jsonl", ngram=6)
    cmd = dc.roles[0].args[-1]
    assert f"--reference {corpus['root'] / 'in' / 'f2.jsonl'}" in cmd and "--ngram 6" in cmd  # made absolute


def test_a_rank_killed_mid_exchange_is_restarted_and_resumes(
    corpus: dict[str, Any], near_drop: Path, tmp_path: Path
) -> None:
    """SIGKILL of one rank in the first propagation pass; torchrun restarts the ranks, which skip the
    committed map, pairs and verify tasks and finish with the same bytes as one process."""
    out = tmp_path / "out"
    worker = str(Path(__file__).with_name("dedup_kill_worker.py"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--max_restarts", "1", worker, "dedup", "--input", corpus["input"], "--output", str(out),
           *SMALL_UNITS, "--progress_s", "0"]  # fmt: skip
    env = {**os.environ, "TDP_DEDUP_KILL_MARK": str(tmp_path / "killed")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "killed").exists() and "resumed: skipped" in proc.stderr
    assert output_files(out) == output_files(near_drop)
    attempts: dict[str, set[int]] = {}
    for p in (out / "_units").glob("*.*.json"):
        attempts.setdefault(p.name.split(".")[1], set()).add(orjson.loads(p.read_bytes())[ms.ATTEMPT])
    assert attempts["map"] == attempts["verify"] == {0} and attempts["lab1"] == {1}  # kept; redone


def test_the_trainer_reads_a_dedup_output(near_drop: Path) -> None:
    """``OutputDataset`` reads what dedup kept, exactly the records of its parts."""
    from torchx_datapipes.data import OutputDataset

    parts = sorted(near_drop.glob("part-*.jsonl"))
    kept = [json.loads(line) for p in parts for line in p.read_text().splitlines()]
    got = list(OutputDataset(str(near_drop), read_ahead=0))
    assert len(got) == len(kept) > 0
    assert sorted(json.dumps(r, sort_keys=True) for r in got) == sorted(
        json.dumps(r, sort_keys=True) for r in kept
    )
