"""``--output_format megatron``: an output-only format, written through the registry's PartWriter
and read back by ``TokenDataset`` (issue 33).

The writer is tested in process (records in order, bad records naming their type and the fix,
the dtype, the ``.idx`` layout read by ``decode_index``); the client refuses ``--format megatron``;
one transform runs in process (the runner's ``main``) and its output is read back by
``TokenDataset`` window by window, against the stream the function returned.
"""

import re
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import orjson
import pytest
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.data import OutputDataset, TokenDataset
from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats import registry
from torchx_datapipes.formats.megatron import SECTION
from torchx_datapipes.formats.megatron.index import decode_index, encode_index, index_size, sequences_of
from torchx_datapipes.formats.megatron.writer import MegatronPart, MegatronShard
from torchx_datapipes.formats.writing import PartWriter, part_name
from torchx_datapipes.io.checksum import sum_bytes

# ---- the registry ------------------------------------------------------------------------------


def test_megatron_is_a_registered_output_only_format() -> None:
    fmt = registry.get_format("megatron")
    assert fmt.output_only and not fmt.readable_input and fmt.read_by == "TokenDataset"
    assert "megatron" in registry.output_names() and "megatron" not in registry.input_names()
    assert registry.writer_class("megatron") is MegatronPart
    assert part_name(3, "megatron") == "part-00003.bin"
    assert not registry.get_format("jsonl").output_only


def test_input_side_refuses_megatron_naming_what_reads_it() -> None:
    want = "megatron is an output-only format: it writes parts and reads no input files (TokenDataset reads"
    with pytest.raises(ValueError, match=re.escape(want + " its outputs); use one of auto, csv")):
        registry.input_class("megatron")
    with pytest.raises(ValueError, match="output-only format; TokenDataset reads its outputs"):
        registry.get_format("megatron").input_class()


def test_the_client_refuses_format_megatron_before_packaging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "data/a.jsonl", [{"i": 0}])
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    with pytest.raises(InvalidArgumentError) as info:
        components.transform(fn="t.py:f", input="data/*.jsonl", output="out", format="megatron")
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("transform") and "--format" in msg, msg
    assert "megatron is an output-only format" in msg and "TokenDataset reads its outputs" in msg, msg
    assert not (tmp_path / ".tdp/artifacts").exists()
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", output_format="megatron")
    assert "--output_format megatron" in app.roles[0].args[-1]


# ---- the writer ------------------------------------------------------------------------------------

GOOD: List[Any] = [
    [5, 6, 7],
    (8,),
    np.arange(3, dtype=np.int16),
    np.array([2**31 - 1], dtype=np.uint64),
    torch.tensor([9, 10], dtype=torch.int64),
    {"input_ids": [11, 12], "text": "kept aside"},
    {"input_ids": torch.tensor([13], dtype=torch.int32)},
    [],  # an empty document
]
GOOD_IDS = [[5, 6, 7], [8], [0, 1, 2], [2**31 - 1], [9, 10], [11, 12], [13], []]

BAD: List[Tuple[Any, List[str]]] = [
    ("some text", ["got a str", "tokenize the text first"]),
    (3, ["got a int", "one record per item", "[ids]"]),
    (None, ["got a NoneType", "return the record's token ids"]),
    ([1.0, 2.0], ["a list holding a float at [0]", "cast them with int()"]),
    ([1, "a"], ["a list holding a str at [1]"]),
    ([[1, 2], [3, 4]], ["a list holding a list at [0]", "one sequence per record"]),
    ([1, [2]], ["a list holding a list at [1]"]),
    ([True, False], ["a list holding a bool at [0]"]),
    (np.ones(2, dtype=np.float32), ["a numpy array of float32 values", "token ids are integers"]),
    (np.zeros((2, 2), dtype=np.int64), ["a 2-D numpy array of shape (2, 2)", "flatten it"]),
    (np.array([True]), ["a numpy array of bool values"]),
    (torch.ones(2), ["a torch tensor of torch.float32 values", ".long()"]),
    (torch.ones(2, dtype=torch.bfloat16), ["torch.bfloat16 values"]),
    ({"text": "x", "id": 1}, ["a dict without 'input_ids' (its fields: ['id', 'text'])"]),
    ({"input_ids": [0.5]}, ["field input_ids: ", "a list holding a float"]),
    ([3, -1], ["token id -1 at [1] is negative"]),
    (np.array([-2], dtype=np.int8), ["token id -2 at [0] is negative"]),
    ([2**31], ["token id 2147483648 at [0] does not fit the part's int32 (at most 2147483647)", "int64"]),
    ([-1, 2**63], ["token id -1 at [0] is negative"]),
    ([2**70], [f"token id {2**70} at [0] does not fit"]),
]


def _read_part(url: Path) -> Tuple[Any, List[List[int]]]:
    index = decode_index(url.with_suffix(".idx").read_bytes(), "idx")
    data = np.frombuffer(url.read_bytes(), index.dtype)
    seqs = [data[p // index.dtype.itemsize :][:n].tolist() for p, n in zip(index.pointers, index.lengths)]
    return index, seqs


def test_one_sequence_per_record_in_order_and_an_index_decode_index_reads(tmp_path: Path) -> None:
    w = PartWriter(str(tmp_path / "part-00000.bin"), "megatron")
    assert w.write(GOOD[:3]) == [] and w.write(GOOD[3:]) == []
    w.commit()
    index, seqs = _read_part(tmp_path / "part-00000.bin")
    assert index.dtype == np.dtype("int32") and seqs == GOOD_IDS
    assert index.lengths.tolist() == [len(s) for s in GOOD_IDS]
    assert index.documents.tolist() == list(range(len(GOOD_IDS) + 1)) and w.records == len(GOOD_IDS)
    idx = (tmp_path / "part-00000.idx").read_bytes()
    sums = {f.path: f for f in w.file_sums("part-00000.bin")}
    assert set(sums) == {"part-00000.bin", "part-00000.idx", "_index/part-00000.bin.sums"}
    assert (sums["part-00000.idx"].size, sums["part-00000.idx"].xxh3_128) == (len(idx), sum_bytes(idx))
    assert sums["part-00000.bin"].size == 4 * sum(map(len, GOOD_IDS))


@pytest.mark.parametrize("value, needles", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_record_that_is_not_token_ids_is_a_failure_naming_its_type_and_the_fix(
    tmp_path: Path, value: Any, needles: List[str]
) -> None:
    w = PartWriter(str(tmp_path / "part-00000.bin"), "megatron")
    (failure,) = w.write([[1, 2], value, [3]])
    assert failure[0] == 1, failure
    for needle in needles:
        assert needle in failure[1], failure[1]
    w.commit()
    assert _read_part(tmp_path / "part-00000.bin")[1] == [[1, 2], [3]] and w.records == 2


class Uint16Part(MegatronPart):
    token_dtype = "uint16"


def test_the_dtype_is_int32_unless_a_registered_subclass_says_otherwise(tmp_path: Path) -> None:
    registry.register_writer("megatron16", Uint16Part)
    try:
        w = PartWriter(str(tmp_path / "part-00000.bin"), "megatron16")
        bad = w.write([[65535, 0], [65536]])
        assert bad == [(1, bad[0][1])] and "does not fit the part's uint16 (at most 65535)" in bad[0][1]
        w.commit()
        index, seqs = _read_part(tmp_path / "part-00000.bin")
        assert index.dtype == np.dtype("uint16") and seqs == [[65535, 0]]
        assert (tmp_path / "part-00000.bin").stat().st_size == 4
    finally:
        registry.unregister("megatron16")


def test_the_tokenize_ops_shard_is_unchanged(tmp_path: Path) -> None:
    shard = MegatronShard(str(tmp_path / "part-00000.bin"), "uint16")
    shard.add(np.array([1, 2], dtype=np.uint16))
    with pytest.raises(TypeError, match="tokens of dtype int64 written to a uint16 shard"):
        shard.add(np.array([3], dtype=np.int64))
    shard.commit()
    assert shard.records == 1 and shard.tokens == 2 and _read_part(tmp_path / "part-00000.bin")[1] == [[1, 2]]


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_the_document_count_follows_from_the_index_size(n: int) -> None:
    assert len(encode_index(np.int32, np.ones(n, dtype=np.int64))) == index_size(n)
    assert sequences_of(index_size(n)) == n
    with pytest.raises(ReadError, match="is not the size of a one-sequence-per-document index"):
        sequences_of(index_size(n) + 3)


# ---- a transform to megatron, read back by TokenDataset -----------------------------------------

SEQ = 7
BARE_LIST = 17  # the function returns a bare list for this record: flat-mapped into ints, refused


class ToIds:
    """A record's token ids in the several shapes the writer takes (and a few it refuses)."""

    def __call__(self, rec: Dict[str, Any]) -> Any:
        i = rec["i"]
        ids = ids_of(i)
        if i % 11 == 4:
            return None  # filtered
        if i % 17 == 5:
            return f"text {i}"  # not token ids: a bad record
        if i == BARE_LIST:
            return ids
        return [
            {"input_ids": ids},
            np.asarray(ids, dtype=np.int64),
            torch.tensor(ids, dtype=torch.int32),
            [ids],
        ][i % 4]


def ids_of(i: int) -> List[int]:
    return [i * 100 + k for k in range(i % 5)]  # i % 5 == 0: an empty document


def kept(i: int) -> bool:
    return i % 11 != 4 and i % 17 != 5 and i != BARE_LIST


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Dict[str, Any]]:
    root = tmp_path_factory.mktemp("megatron")
    write_jsonl(root / "in/a.jsonl", [{"i": i} for i in range(30)])
    write_jsonl(root / "in/b.jsonl", [{"i": i} for i in range(30, 50)])
    m = run_op("transform", str(root / "in"), root / "out", "--output_format", "megatron", "--on_error",
               "skip", "--max_error_rate", "0.5", fn=ToIds())  # fmt: skip
    return root / "out", m


def test_the_manifest_lists_the_parts_as_one_token_stream(out: Tuple[Path, Dict[str, Any]]) -> None:
    path, m = out
    docs = [ids_of(i) for i in range(50) if kept(i)]
    section = m[SECTION]
    assert section["dtype"] == "int32" and section["documents"] == len(docs) == m["records_out"]
    assert section["tokens"] == sum(map(len, docs))
    (a, b) = section["shards"]
    assert (a["prefix"], b["prefix"]) == ("part-00000", "part-00001")
    assert a["documents"] == sum(kept(i) for i in range(30)) and b["first_document"] == a["documents"]
    assert a["tokens"] == sum(len(ids_of(i)) for i in range(30) if kept(i)) == b["first_token"]
    assert a["first_document"] == a["first_token"] == 0
    seqs = _read_part(path / "part-00000.bin")[1] + _read_part(path / "part-00001.bin")[1]
    assert seqs == docs


def test_bad_records_are_quarantined_with_their_line_and_the_fix(out: Tuple[Path, Dict[str, Any]]) -> None:
    path, m = out
    errors = [
        orjson.loads(x) for p in sorted((path / "_errors").glob("*")) for x in p.read_bytes().splitlines()
    ]
    by_line = {(Path(e["file"]).name, e["line"]): e["error"] for e in errors}
    strs = {("a.jsonl", 6), ("a.jsonl", 23), ("b.jsonl", 10)}  # i = 5, 22, 39
    assert strs <= set(by_line) and all("got a str" in by_line[k] for k in strs), by_line
    bare = [e for k, e in by_line.items() if k == ("a.jsonl", BARE_LIST + 1)]
    assert bare and "got a int" in bare[0] and "as {'input_ids': ids} or as [ids]" in bare[0], by_line
    assert m["filtered"] == sum(i % 11 == 4 for i in range(50))


def test_token_dataset_reads_the_transforms_output(out: Tuple[Path, Dict[str, Any]]) -> None:
    path, _ = out
    docs = [ids_of(i) for i in range(50) if kept(i)]
    ids = np.concatenate([np.asarray(d, dtype=np.int64) for d in docs])
    doc_ids = np.concatenate([np.full(len(d), k) for k, d in enumerate(docs)])
    pos = np.concatenate([np.arange(len(d)) for d in docs])
    ds = TokenDataset(str(path), seq_len=SEQ)
    assert ds.num_tokens == len(ids) and ds.num_documents == len(docs) and ds.eos_id is None
    windows = list(ds)
    assert len(windows) == len(ids) // SEQ == ds.num_windows
    for w, item in enumerate(windows):
        span = slice(w * SEQ, (w + 1) * SEQ)
        assert item["input_ids"].tolist() == ids[span].tolist(), w
        assert item["document_ids"].tolist() == doc_ids[span].tolist(), w
        assert item["position_ids"].tolist() == pos[span].tolist(), w
    with pytest.raises(ReadError, match="only a tokenize output has provenance"):
        ds.source(0)


def test_output_dataset_points_to_token_dataset(out: Tuple[Path, Dict[str, Any]]) -> None:
    with pytest.raises(ReadError, match="megatron output is read by TokenDataset, not OutputDataset"):
        OutputDataset(str(out[0]))


def test_megatron_core_opens_every_part(out: Tuple[Path, Dict[str, Any]]) -> None:
    pytest.importorskip("megatron.core")
    with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed" on CPU
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDataset

    got: List[List[int]] = []
    for prefix in ("part-00000", "part-00001"):
        ds = IndexedDataset(str(out[0] / prefix))  # kept while its items are read: they view its mmap
        got.extend(ds[k].tolist() for k in range(len(ds)))
    assert got == [ids_of(i) for i in range(50) if kept(i)]


def test_token_dataset_refuses_a_record_output_naming_output_dataset(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in/a.jsonl", [{"i": 0}])
    run_op("transform", str(tmp_path / "in"), tmp_path / "out", fn=lambda r: r)
    with pytest.raises(ReadError, match="a transform output written as 'jsonl': TokenDataset reads Megatron"):
        TokenDataset(str(tmp_path / "out"), seq_len=4)
