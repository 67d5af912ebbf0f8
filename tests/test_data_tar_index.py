"""The WebDataset writer's offset index: committed with its part, used by the reader, checked, optional."""

import io
import os
import tarfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import orjson
import pytest
import torch
from data_testutil import ident, make_input, split_output, transform_output
from tdp_testutil import run_op

from torchx_datapipes.data import OutputDataset
from torchx_datapipes.data._parts import load_parts
from torchx_datapipes.formats.registry import clear_caches
from torchx_datapipes.formats.webdataset import reader as _tar
from torchx_datapipes.formats.webdataset.decode import member_decoder
from torchx_datapipes.formats.webdataset.tarindex import decode
from torchx_datapipes.io.layout import tar_index_file

SIZES = [60, 50, 47]


@pytest.fixture(autouse=True)
def _fresh_caches() -> Any:
    clear_caches()
    yield
    clear_caches()


def _plain(recs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [{k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in r.items()} for r in recs]


def _read(out: str, **kw: Any) -> List[Dict[str, Any]]:
    clear_caches()
    return _plain(list(OutputDataset(out, read_ahead=0, **kw)))


def _drop_index_from_manifest(out: str) -> None:
    """The manifest as written before tar indexes existed (block sums kept: see test_data_verify.py)."""
    path = Path(out) / "_SUCCESS"
    m = orjson.loads(path.read_bytes())
    for u in m["units"]:
        u["files"] = [f for f in u["files"] if not f["path"].endswith(".tar.idx")]
    path.write_bytes(orjson.dumps(m))


@pytest.fixture(scope="module")
def wds_out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return transform_output(tmp_path_factory.mktemp("tidx"), SIZES, "webdataset")


def _indexed_and_tarfile_members(index: Any, data: bytes) -> Tuple[List[Any], List[Any]]:
    """``(name, data offset, size)`` of every member: as the index has them, and as tarfile reads them."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        want = [(m.name, m.offset_data, m.size) for m in tar if m.isfile()]
    got = [
        (f"{index.keys[r]}.{index.suffixes[index.sids[m]]}", index.offsets[m], index.sizes[m])
        for r in range(len(index.keys))
        for m in range(index.starts[r], index.starts[r + 1])
    ]
    return got, want


def test_index_is_committed_listed_and_matches_the_tar(wds_out: str) -> None:
    manifest = orjson.loads((Path(wds_out) / "_SUCCESS").read_bytes())
    for k, unit in enumerate(manifest["units"]):
        rel = f"part-{k:05d}.tar"
        paths = {f["path"]: f for f in unit["files"]}
        assert (
            set(paths) == {rel, f"_index/{rel}.idx", f"_index/{rel}.sums"}
            and tar_index_file(rel) == f"_index/{rel}.idx"
        )
        idx_path = Path(wds_out) / "_index" / f"{rel}.idx"
        assert os.path.getsize(idx_path) == paths[f"_index/{rel}.idx"]["size"]
        data = (Path(wds_out) / rel).read_bytes()
        index = decode(idx_path.read_bytes(), len(data), SIZES[k])
        got, want = _indexed_and_tarfile_members(index, data)
        assert got == want
    assert not list(Path(wds_out).glob("*.idx")) and sorted(p.name for p in Path(wds_out).glob("*.tar")) == [
        "part-00000.tar", "part-00001.tar", "part-00002.tar",
    ]  # fmt: skip


def test_reader_uses_the_index_and_agrees_with_the_header_scan(
    wds_out: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, parts = load_parts(wds_out, None)
    assert all(p.index is not None for p in parts)
    with monkeypatch.context() as m:
        m.setattr(_tar, "_scanned_index", lambda *a: (_ for _ in ()).throw(AssertionError("scanned")))
        indexed = _read(wds_out)
        shuffled = _read(wds_out, shuffle=True, seed=3, shuffle_window=16)
        cols = _read(wds_out, columns=["id", "nope"])
        mapped = OutputDataset.map_style(wds_out)
        rows = _plain(mapped.__getitems__([100, 3, 4, 5, 150, 3]))
    assert [r["id"] for r in indexed] == list(range(sum(SIZES)))
    assert sorted(r["id"] for r in shuffled) == list(range(sum(SIZES)))
    assert cols[7] == {"__key__": indexed[7]["__key__"], "id": 7, "nope": None}
    assert [r["id"] for r in rows] == [100, 3, 4, 5, 150, 3]
    monkeypatch.setattr(_tar, "_committed_index", lambda *a: None)  # the fallback: scan the headers
    assert _read(wds_out) == indexed
    assert _read(wds_out, shuffle=True, seed=3, shuffle_window=16) == shuffled
    assert _read(wds_out, columns=["id", "nope"]) == cols


def test_an_output_without_indexes_is_read_by_scanning(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "webdataset")
    want = _read(out)
    _drop_index_from_manifest(out)  # as written before indexes existed
    _, parts = load_parts(out, None)
    assert all(p.index is None for p in parts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _read(out) == want


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "records"])
def test_a_damaged_index_is_ignored_with_a_warning(tmp_path: Path, damage: str) -> None:
    out = transform_output(tmp_path, SIZES, "webdataset")
    want = _read(out)
    idx = Path(out) / "_index" / "part-00001.tar.idx"
    data = bytearray(idx.read_bytes())
    if damage == "flip":  # same size, another offset: only the checksum notices
        at = data.index(b'"members":[') + 14
        data[at] = ord("9") if data[at] != ord("9") else ord("8")
        idx.write_bytes(bytes(data))
    elif damage == "truncate":
        idx.write_bytes(bytes(data[:-7]))
    elif damage == "delete":
        idx.unlink()
    else:  # a well-formed index of another part, its manifest entry updated to match
        other = (Path(out) / "_index" / "part-00000.tar.idx").read_bytes()
        idx.write_bytes(other)
        m = orjson.loads((Path(out) / "_SUCCESS").read_bytes())
        from torchx_datapipes.io.checksum import sum_bytes

        for f in m["units"][1]["files"]:
            if f["path"].endswith(".idx"):
                f["size"], f["xxh3_128"] = len(other), sum_bytes(other)
        (Path(out) / "_SUCCESS").write_bytes(orjson.dumps(m))
    with pytest.warns(UserWarning, match="part-00001.tar.idx cannot be used"):
        assert _read(out) == want


def test_decode_refuses_an_index_that_does_not_fit_its_part(wds_out: str) -> None:
    raw = (Path(wds_out) / "_index" / "part-00000.tar.idx").read_bytes()
    size = os.path.getsize(Path(wds_out) / "part-00000.tar")
    decode(raw, size, SIZES[0])
    with pytest.raises(ValueError, match="records in"):
        decode(raw, size + 512, SIZES[0])
    with pytest.raises(ValueError, match="records in"):
        decode(raw, size, SIZES[0] + 1)
    doc = orjson.loads(raw)
    for field, value, why in [
        ("members", doc["members"][:-3], "starts"),
        ("starts", doc["starts"][:-1], "starts"),
        ("members", [doc["members"][0], 100, *doc["members"][2:]], "offsets"),
        ("members", [99, *doc["members"][1:]], "suffix"),
        ("keys", [1, *doc["keys"][1:]], "strings"),
        ("keys", doc["keys"][:-1], "keys for"),
        ("version", 2, "version"),
    ]:
        with pytest.raises(ValueError, match=why):
            decode(orjson.dumps({**doc, field: value}), size, SIZES[0])
    with pytest.raises(ValueError, match="JSON"):
        decode(b"{", size, SIZES[0])


def test_split_output_indexes_beside_each_split_part(tmp_path: Path) -> None:
    out = split_output(tmp_path, [20, 13], "webdataset")
    assert sorted(p.relative_to(out).as_posix() for p in Path(out).rglob("*.idx")) == [
        f"{s}/_index/part-{k:05d}.tar.idx" for s in ("train", "val") for k in range(2)
    ]
    got = []
    for s in ("train", "val"):
        _, parts = load_parts(out, s)
        assert all(p.index is not None for p in parts)
        got += [r["id"] for r in _read(out, split=s)]
    assert sorted(got) == list(range(33))


def test_a_second_job_and_the_webdataset_package_read_the_output(wds_out: str, tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    shards = sorted(str(p) for p in Path(wds_out).glob("*.tar"))
    ids = [int(s["id"]) for p in shards for s in wds.WebDataset(p, shardshuffle=False)]
    assert ids == list(range(sum(SIZES)))
    again = tmp_path / "again"
    m = run_op("transform", wds_out, again, "--output_format", "jsonl", fn=_id_only)  # --input OUT
    assert m["records_out"] == sum(SIZES)
    assert sorted(r["id"] for r in _read(str(again))) == list(range(sum(SIZES)))


def _id_only(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": int(r["id"])}


def test_resume_redoes_a_unit_whose_index_was_damaged(tmp_path: Path) -> None:
    inp, out = make_input(tmp_path, SIZES), tmp_path / "o"
    run_op("transform", inp, out, "--output_format", "webdataset", fn=ident)
    (out / "_SUCCESS").unlink()  # as if the job was killed before its commit
    idx = out / "_index" / "part-00002.tar.idx"
    idx.write_bytes(idx.read_bytes()[:-1] + b" ")
    run_op("transform", inp, out, "--output_format", "webdataset", fn=ident)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the index was rewritten: no fallback
        assert [r["id"] for r in _read(str(out))] == list(range(sum(SIZES)))


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(24, dtype=np.int8).reshape(2, 3, 4),
        np.array(3.5, dtype=np.float16),
        np.zeros((0, 3), dtype=np.int64),
        np.array([True, False]),
        np.arange(6, dtype=np.float64).reshape(2, 3),
        np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)),
    ],
)
def test_npy_members_decode_in_place_like_np_load(arr: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    one = buf.getvalue()
    other = io.BytesIO()
    np.save(other, np.arange(5, dtype=np.int32), allow_pickle=False)  # a header change mid-field
    pad = b"\0" * (-len(one) % 512)
    data = np.frombuffer(bytearray(one + pad + other.getvalue() + one + b"junk"), np.uint8)
    dec = member_decoder("x.npy")
    offsets = [(0, len(one)), (len(one) + len(pad), len(other.getvalue()))]
    offsets.append((offsets[1][0] + offsets[1][1], len(one)))
    got = [dec(data, o, n) for o, n in offsets]
    for t, want in zip(got, [arr, np.arange(5, dtype=np.int32), arr]):
        assert t.dtype == torch.from_numpy(np.ascontiguousarray(want)).dtype and tuple(t.shape) == want.shape
        assert np.array_equal(t.numpy(), want)
    got[0].fill_(1) if got[0].numel() else None  # writable; a view of its own read only
    assert np.array_equal(got[2].numpy(), arr)


def _mixed(r: Dict[str, Any]) -> Dict[str, Any]:
    i = int(r["id"])
    if i < 60:  # part 0: one layout
        return {"id": i, "a": np.full(3, i, dtype=np.int16)}
    if i < 110:  # part 1: another
        return {"id": i, "b": f"b{i}", "cls": i % 3}
    return {"id": i, "a": np.full(3, i, dtype=np.int16), "b": None if i % 2 else f"b{i}"}  # part 2: varies


def test_parts_of_different_members_mix_in_a_shuffle_window(tmp_path: Path) -> None:
    inp = make_input(tmp_path, SIZES)
    run_op("transform", inp, tmp_path / "o", "--output_format", "webdataset", fn=_mixed)
    out = str(tmp_path / "o")
    plain = _read(out)
    assert [r["id"] for r in plain] == list(range(sum(SIZES)))
    assert set(plain[0]) == {"__key__", "id", "a"} and set(plain[60]) == {"__key__", "id", "b", "cls"}
    assert plain[111] == {"__key__": plain[111]["__key__"], "id": 111, "a": plain[111]["a"], "b": None}
    assert plain[112]["b"] == "b112"
    for kw in [
        {"shuffle": True, "seed": 1, "shuffle_window": 200},
        {"columns": ["b", "id"]},
        {"columns": ["__key__", "cls"], "shuffle": True, "seed": 2, "shuffle_window": 100},
    ]:
        got = _read(out, **kw)
        by_key = {r["__key__"]: r for r in got}
        assert len(got) == len(by_key) == sum(SIZES)
        cols = kw.get("columns")
        for r in plain:
            want = r if cols is None else {"__key__": r["__key__"], **{c: r.get(c) for c in cols}}
            assert by_key[r["__key__"]] == want
            assert list(by_key[r["__key__"]]) == list(want)  # the same field order too


def _some_empty(r: Dict[str, Any]) -> Dict[str, Any]:
    i = int(r["id"])
    return {} if i % 10 == 3 else {"id": i}  # {}: a record with no member


def test_a_record_without_members_is_read_from_the_index(tmp_path: Path) -> None:
    inp = make_input(tmp_path, SIZES)
    run_op("transform", inp, tmp_path / "o", "--output_format", "webdataset", fn=_some_empty)
    recs = _read(str(tmp_path / "o"))
    assert len(recs) == sum(SIZES)
    assert recs[3] == {"__key__": "00000_000003"} and recs[4]["id"] == 4
    assert [r.get("id") for r in recs if "id" in r] == [i for i in range(sum(SIZES)) if i % 10 != 3]


def test_a_part_modified_after_commit_is_refused_even_with_an_index(tmp_path: Path) -> None:
    out = Path(transform_output(tmp_path, SIZES, "webdataset"))
    part = out / "part-00001.tar"
    part.write_bytes(part.read_bytes() + b"\0" * 512)
    with pytest.raises(ValueError, match=r"part-00001\.tar is \d+ bytes but the manifest .* recorded \d+"):
        list(OutputDataset(str(out), read_ahead=0))
    clear_caches()
    with pytest.raises(ValueError, match=r"part-00001\.tar is \d+ bytes"):
        OutputDataset.map_style(str(out))[70]


def _long_keys(r: Dict[str, Any]) -> Dict[str, Any]:
    i = int(r["id"])
    return {"__key__": f"dir/ünï-{'k' * (120 + i % 7)}-{i}", "id": i, "v": np.arange(i % 5)}


def test_pax_headers_long_and_non_ascii_names_are_indexed_exactly(tmp_path: Path) -> None:
    inp = make_input(tmp_path, [9, 4])
    run_op("transform", inp, tmp_path / "o", "--output_format", "webdataset", fn=_long_keys)
    data = (tmp_path / "o" / "part-00000.tar").read_bytes()
    index = decode((tmp_path / "o" / "_index" / "part-00000.tar.idx").read_bytes(), len(data), 9)
    got, want = _indexed_and_tarfile_members(index, data)
    assert got == want and want[0][0].startswith("dir/ünï-")
    recs = _read(str(tmp_path / "o"))
    assert [r["id"] for r in recs] == list(range(13)) and recs[3]["v"] == [0, 1, 2]
