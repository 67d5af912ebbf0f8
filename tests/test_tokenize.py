"""Issue 31: ``datapipes.tokenize`` writes Megatron ``.bin``/``.idx`` shards, exactly once, for any ``-j``.

One real ``torchx run -s local_cwd datapipes.tokenize -j 1x2`` launch per module (``runs``); the same
job in this process with 1 and 2 workers. The shards are read twice, independently of our own
reader: by the struct layout reader below (Megatron's documented ``_IndexWriter`` layout) and by
``megatron.core.datasets.indexed_dataset.IndexedDataset`` itself.
"""

import struct
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import orjson
import pytest
from tdp_testutil import run_component, run_op, run_torchx
from tokenize_dataset_worker import build_tokenizer, write_corpus

from torchx_datapipes import api, components, ops
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.data import TokenDataset
from torchx_datapipes.runner.badrecords import RecordError

SIZES = [230, 170, 101]
_CODES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}


def read_layout(prefix: Path) -> List[np.ndarray]:
    """Every sequence of ``PREFIX.bin`` by the documented ``.idx`` layout alone (not our decoder)."""
    idx = (prefix.parent / f"{prefix.name}.idx").read_bytes()
    binary = (prefix.parent / f"{prefix.name}.bin").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    (version,) = struct.unpack_from("<Q", idx, 9)
    (code,) = struct.unpack_from("<B", idx, 17)
    n, ndocs = struct.unpack_from("<QQ", idx, 18)
    assert version == 1 and ndocs == n + 1
    off = 34
    lengths = struct.unpack_from(f"<{n}i", idx, off)
    pointers = struct.unpack_from(f"<{n}q", idx, off + 4 * n)
    documents = struct.unpack_from(f"<{ndocs}q", idx, off + 12 * n)
    assert off + 12 * n + 8 * ndocs == len(idx)
    assert list(documents) == list(range(n + 1))  # one sequence per document
    dtype = np.dtype(_CODES[code])
    assert sum(lengths) * dtype.itemsize == len(binary)
    seqs = []
    for length, ptr in zip(lengths, pointers):
        seqs.append(np.frombuffer(binary, dtype, length, ptr))
    return seqs


def prefixes(out: Path) -> List[Path]:
    shards = orjson.loads((out / "_SUCCESS").read_bytes())["tokenize"]["shards"]
    return [out / s["prefix"] for s in shards]


def shard_bytes(out: Path) -> Dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*"))}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, List[str]]:
    root = tmp_path_factory.mktemp("tok")
    build_tokenizer(root / "tokenizer.json")
    return root, write_corpus(root / "data", SIZES)


@pytest.fixture(scope="module")
def expected(project: Tuple[Path, List[str]]) -> List[List[int]]:
    from tokenizers import Tokenizer

    root, docs = project
    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    return [tok.encode(t).ids + [eos] for t in docs]


@pytest.fixture(scope="module")
def runs(project: Tuple[Path, List[str]]) -> Dict[str, Path]:
    """One real launch at -j 1x2; the same job in this process with 1 and 2 workers."""
    root, _ = project
    common = ["--tokenizer", "tokenizer.json", "--eos", "</s>", "--unit_mb", "0.006", "--shard_mb", "0.001"]
    args = ["run", "-s", "local_cwd", "datapipes.tokenize", "--input", "data/*.jsonl", "--output", "out/1x2",
            "-j", "1x2", *common]  # fmt: skip
    res = run_torchx(args, root)
    assert res.returncode == 0, res.stdout + res.stderr
    outs = {"1x2": root / "out/1x2"}
    for name, workers in (("1x1", 1), ("1x1w2", 2)):
        run_component(
            root, "tokenize", input="data/*.jsonl", output=f"out/{name}", tokenizer="tokenizer.json",
            eos="</s>", j="1x1", num_workers=workers, unit_mb=0.006, shard_mb=0.001,
        )  # fmt: skip
        outs[name] = root / "out" / name
    return outs


def test_shards_hold_each_document_encoded_plus_eos_in_input_order(
    runs: Dict[str, Path], expected: List[List[int]]
) -> None:
    out = runs["1x2"]
    got = [seq.tolist() for p in prefixes(out) for seq in read_layout(p)]
    assert got == expected
    m = orjson.loads((out / "_SUCCESS").read_bytes())
    assert m["records_out"] == sum(SIZES) and m["tokens"] == sum(map(len, expected))
    t = m["tokenize"]
    assert t["dtype"] == "uint16" and t["eos_id"] == 1 and t["documents"] == sum(SIZES)
    assert len(t["shards"]) > len(m["units"]) > 3  # several units per file, several shards per unit
    assert {p.name for p in prefixes(out)} >= {"part-00000", "part-00000.p001"}
    assert all(s["tokens"] * 2 <= 1000 or s["documents"] == 1 for s in t["shards"])  # --shard_mb 0.001
    check = t["decode_check"]
    assert check["sampled"] >= len(m["units"]) and check["tokens_equal"] == check["sampled"]
    assert check["text_equal"] == check["sampled"]  # byte-level BPE is lossless
    always, optional = ops.manifest_keys("tokenize")
    assert always <= set(m) <= always | optional


def test_shards_are_byte_identical_for_any_j_and_workers(runs: Dict[str, Path]) -> None:
    want = shard_bytes(runs["1x1"])
    assert any(k.endswith(".bin") for k in want) and any(k.endswith(".lines.json") for k in want)
    assert shard_bytes(runs["1x2"]) == want
    assert shard_bytes(runs["1x1w2"]) == want


def test_megatron_core_indexed_dataset_opens_every_part(
    runs: Dict[str, Path], expected: List[List[int]]
) -> None:
    with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed" on CPU
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset

    got: List[List[int]] = []
    for prefix in prefixes(runs["1x2"]):
        ds = IndexedDataset(str(prefix))
        assert len(ds) == len(ds.document_indices) - 1
        got.extend(ds[i].tolist() for i in range(len(ds)))
    assert got == expected


def test_provenance_maps_every_document_to_its_input_line(
    runs: Dict[str, Path], project: Tuple[Path, List[str]]
) -> None:
    root, docs = project
    ds = TokenDataset(str(runs["1x1"]), seq_len=8)
    for doc in (0, 1, SIZES[0] - 1, SIZES[0], SIZES[0] + 77, sum(SIZES) - 1):
        path, line = ds.source(doc)
        rec = orjson.loads(Path(path).read_text(encoding="utf-8").splitlines()[line - 1])
        assert rec["text"] == docs[doc] and rec["id"] == doc


def test_bad_records_are_quarantined_or_stop_the_job_with_file_and_line(
    project: Tuple[Path, List[str]], tmp_path: Path
) -> None:
    root, _ = project
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"text": "the fox"}\n{"body": "no text"}\n{"text": 3}\nnot json\n{"text": "the dog"}\n')
    tok = str(root / "tokenizer.json")
    m = run_op("tokenize", str(inp), tmp_path / "skip", "--tokenizer", tok, "--on_error", "skip",
               "--max_error_rate", "1")  # fmt: skip
    assert m["records_out"] == 2 and m["bad"] == 3
    (part,) = (tmp_path / "skip/_errors").glob("*.jsonl")
    errors = sorted((orjson.loads(x) for x in part.read_text().splitlines()), key=lambda e: e["line"])
    assert [(e["line"], e["stage"]) for e in errors] == [(2, "tokenize"), (3, "tokenize"), (4, "parse")]
    assert "no field 'text'" in errors[0]["error"] and "--field" in errors[0]["error"]
    (tmp_path / "two.jsonl").write_text('{"text": "the fox"}\n{"body": "no text"}\n')
    with pytest.raises(RecordError, match=r"two.jsonl, line 2: .*no field 'text'.*\n(.|\n)*fix:"):
        run_op("tokenize", str(tmp_path / "two.jsonl"), tmp_path / "raise", "--tokenizer", tok)


def test_text_input_and_int32_and_no_eos(project: Tuple[Path, List[str]], tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    root, docs = project
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(docs[:20]) + "\n", encoding="utf-8")
    tok = str(root / "tokenizer.json")
    m = run_op("tokenize", str(inp), tmp_path / "out", "--tokenizer", tok, "--dtype", "int32")
    want = [Tokenizer.from_file(tok).encode(t).ids for t in docs[:20] if t]  # blank lines are no records
    (prefix,) = prefixes(tmp_path / "out")
    assert [s.tolist() for s in read_layout(prefix)] == want
    assert m["tokenize"]["dtype"] == "int32" and m["tokenize"]["eos_id"] is None


def _wordlevel(path: Path, size: int) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return str(path)


def test_dtype_auto_follows_megatron_and_big_ids_fit(project: Tuple[Path, List[str]], tmp_path: Path) -> None:
    tok = _wordlevel(tmp_path / "big.json", 70_000)
    (tmp_path / "in.jsonl").write_text('{"text": "w1 w69999 w65535"}\n')
    m = run_op("tokenize", str(tmp_path / "in.jsonl"), tmp_path / "out", "--tokenizer", tok)
    assert m["tokenize"]["dtype"] == "int32"
    assert [s.tolist() for s in read_layout(tmp_path / "out/part-00000")] == [[1, 69999, 65535]]


BAD = [
    ({"eos": "<eos>"}, ["--eos", "'<eos>' is not a token", "'</s>'"]),
    ({"tokenizer": "missing.json"}, ["--tokenizer", "missing.json does not exist"]),
    ({"tokenizer": "data/part-0.jsonl"}, ["--tokenizer", "not a Hugging Face tokenizer.json"]),
    ({"dtype": "int16"}, ["--dtype must be one of auto, uint16, int32, int64", "'int16'"]),
    ({"shard_mb": 0}, ["--shard_mb must be > 0"]),
    ({"tokenizer": None}, ["--tokenizer is required", "tokenizer.json"]),
    ({"field": ""}, ["--field must not be empty"]),
    (
        {"tokenizer": "BIG", "dtype": "uint16", "eos": None},
        ["--dtype", "uint16 cannot hold", "70,000 tokens"],
    ),
]


@pytest.mark.parametrize(
    "bad, needles", BAD, ids=[",".join(f"{k}={v}" for k, v in b[0].items()) for b in BAD]
)
def test_options_are_checked_on_the_client(
    project: Tuple[Path, List[str]], monkeypatch: pytest.MonkeyPatch, bad: Dict[str, Any], needles: List[str]
) -> None:
    root, _ = project
    monkeypatch.chdir(root)
    if bad.get("tokenizer") == "BIG":
        bad = {**bad, "tokenizer": _wordlevel(root / "big.json", 70_000)}
    kw: Dict[str, Any] = {"input": "data/*.jsonl", "output": "out/bad", "tokenizer": "tokenizer.json",
                          "eos": "</s>", **bad}  # fmt: skip
    with pytest.raises(InvalidArgumentError) as info:
        components.tokenize(**kw)
    msg = str(info.value)
    assert "\n" not in msg and all(n in msg for n in needles), msg
    assert not (root / "out/bad").exists()


def test_api_tokenize_builds_the_job_with_an_absolute_tokenizer(
    project: Tuple[Path, List[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = project
    monkeypatch.chdir(root)
    app = api.tokenize("data/*.jsonl", "out/api", tokenizer="tokenizer.json", eos="</s>", j="1x1")
    cmd = app.roles[0].args[-1]
    assert f"--tokenizer {root / 'tokenizer.json'}" in cmd and "--eos '</s>'" in cmd


def test_a_relaunch_resumes_committed_units_and_gives_the_same_shards(
    project: Tuple[Path, List[str]], tmp_path: Path, runs: Dict[str, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    """A job killed after some units committed: the relaunch redoes only the others."""
    root, _ = project
    out = tmp_path / "out"
    args = [
        "--tokenizer",
        str(root / "tokenizer.json"),
        "--eos",
        "</s>",
        "--unit_mb",
        "0.006",
        "--shard_mb",
        "0.001",
    ]
    run_op("tokenize", str(root / "data"), out, *args)
    for p in [out / "_SUCCESS", out / "_units/00003.json", *out.glob("part-00003.*")]:
        p.unlink()  # as if killed before unit 3 committed (and before _SUCCESS)
    capfd.readouterr()
    m = run_op("tokenize", str(root / "data"), out, *args)
    assert "resumed: skipped 11 committed unit(s)" in capfd.readouterr().err
    assert shard_bytes(out) == shard_bytes(runs["1x1"]) and m["records_out"] == sum(SIZES)
