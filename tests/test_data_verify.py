"""Issue 23 items 2 and 3: OutputDataset never serves a record of a part modified after the commit,
and never follows a manifest path out of the output.

Each case writes a real output in-process (the runner's ``main``), damages it as the issue did, then
reads it as a user does: iterable, map-style, and (once each) through ``DataLoader(num_workers=2)``.
"""

import os
import random
import re
import tarfile
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest
from data_testutil import ident, make_input, transform_output
from tdp_testutil import run_op
from torch.utils.data import DataLoader

from torchx_datapipes.data import OutputDataset, _formats, _registry, _verify
from torchx_datapipes.data._parts import OutsideOutputError
from torchx_datapipes.data._verify import PartModifiedError
from torchx_datapipes.io import blocksums
from torchx_datapipes.io.checksum import sum_bytes
from torchx_datapipes.io.tarindex import decode

SIZES = [40, 60, 30]  # part 1 holds ids 40..99
PART1 = set(range(40, 100))
FIX = "--overwrite True"


def with_tensor(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": r["id"], "x": np.full(4, float(r["id"]), np.float32)}


def _served(make: Callable[[], Any]) -> List[int]:
    """Ids served before the error (which must come; a Parquet part's footer is read at construction)."""
    got: List[int] = []
    with pytest.raises(
        PartModifiedError, match=rf"part-00001\.\w+: .*modified after the job committed.*{FIX}"
    ):
        for rec in make():
            got.append(int(rec["id"]))
    return got


def _assert_refused(out: str, what: str) -> None:
    """Iterable (in order and shuffled), map-style, and a 2-worker DataLoader: none of part 1 is served."""
    for shuffle in (False, True):
        served = _served(lambda: OutputDataset(out, shuffle=shuffle, seed=3))  # noqa: B023
        assert not PART1 & set(served), f"{what}: a record of the modified part was served"
    m = OutputDataset.map_style(out)
    assert int(m[0]["id"]) == 0  # part 0 is intact
    for i in (40, 55):  # records in the modified 64 KiB block
        with pytest.raises(PartModifiedError, match=rf"part-00001.*{what}.*{FIX}"):
            m[i]
    with pytest.raises(PartModifiedError, match="part-00001"):
        m.__getitems__([1, 50, 120])
    assert [int(r["id"]) for r in m.__getitems__([1, 120])] == [1, 120]


def _workers(out: str) -> Any:
    """An iterator over a 2-worker DataLoader of ``out``."""
    return iter(DataLoader(OutputDataset(out), batch_size=5, num_workers=2))


def _stop(batches: Any) -> None:
    """Stop the workers of a DataLoader a worker's error ended, at once: left to the garbage collector
    (the error's traceback holds the iterator), their shutdown waits 5 s a worker, in a later test."""
    batches._shutdown_workers()


def _assert_refused_by_loader(out: str) -> None:
    served: List[int] = []
    batches = _workers(out)
    try:
        with pytest.raises(PartModifiedError, match=rf"part-00001.*modified after the job committed.*{FIX}"):
            for batch in batches:  # a worker raises
                served.extend(int(i) for i in batch["id"])
    finally:
        _stop(batches)
    assert not PART1 & set(served)


def test_jsonl_part_edited_in_place_to_the_same_size(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    part = Path(out) / "part-00001.jsonl"
    data = part.read_bytes()
    edited = data.replace(b'"id":55,', b'"id":56,', 1)  # a duplicate id 56, id 55 lost
    assert edited != data and len(edited) == len(data)
    part.write_bytes(edited)
    _assert_refused(out, r"bytes 0-\d+ \(block 0 of 1\) do not match")
    _assert_refused_by_loader(out)


def test_parquet_part_with_a_flipped_bit_in_a_snappy_page(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "parquet")
    part = Path(out) / "part-00001.parquet"
    meta = pq.ParquetFile(part).metadata
    col = next(meta.row_group(0).column(i) for i in range(meta.num_columns) if meta.schema[i].name == "x")
    assert col.compression == "SNAPPY"
    data = bytearray(part.read_bytes())
    at = col.data_page_offset + col.total_compressed_size - 4  # inside the compressed page payload
    data[at] ^= 0x01
    part.write_bytes(bytes(data))
    _assert_refused(out, "do not match the checksum")


def test_webdataset_npy_member_with_four_changed_bytes(tmp_path: Path) -> None:
    out = tmp_path / "out-wds"
    run_op("transform", make_input(tmp_path, SIZES), out, "--output_format", "webdataset", fn=with_tensor)
    part = out / "part-00001.tar"
    data = bytearray(part.read_bytes())
    index = decode((out / "_index" / "part-00001.tar.idx").read_bytes(), len(data), SIZES[1])
    m = next(m for m in range(len(index.sids)) if index.suffixes[index.sids[m]] == "x.npy")
    first = index.offsets[m] + index.sizes[m] - 16  # x[0] of the first record's x.npy member
    data[first : first + 4] = np.float32(-1.0).tobytes()
    part.write_bytes(bytes(data))
    with tarfile.open(part) as tar:  # the tar itself is still well-formed: only the sums can tell
        assert len(tar.getnames()) == 2 * SIZES[1]
    _assert_refused(str(out), "do not match the checksum")
    _assert_refused_by_loader(str(out))


def test_block_sums_file_modified_or_missing_is_refused(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    sums = Path(out) / "_index" / "part-00001.jsonl.sums"
    sums.write_bytes(sums.read_bytes().replace(b'"size":', b'"size": ', 1))
    _assert_refused(out, r"block checksums .*part-00001.jsonl.sums are \d+ bytes")
    sums.unlink()
    with pytest.raises(PartModifiedError, match=r"part-00001.jsonl.sums \(listed in _SUCCESS\) are missing"):
        list(OutputDataset(out))


def _drop_sums(out: str) -> None:
    path = Path(out) / "_SUCCESS"
    m = orjson.loads(path.read_bytes())
    for u in m["units"]:
        u["files"] = [f for f in u["files"] if not f["path"].endswith(".sums")]
    path.write_bytes(orjson.dumps(m))


def test_an_output_without_block_sums_is_verified_whole_with_a_warning(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    _drop_sums(out)  # as written before block sums existed
    with pytest.warns(UserWarning, match="without per-block checksums.*verified whole"):
        assert sorted(int(r["id"]) for r in OutputDataset(out)) == list(range(sum(SIZES)))
    part = Path(out) / "part-00001.jsonl"
    part.write_bytes(part.read_bytes().replace(b'"id":55,', b'"id":56,', 1))
    _registry.clear_caches()  # as in a new process
    _verify._WARNED.clear()
    with pytest.warns(UserWarning):
        served = _served(lambda: OutputDataset(out))
    assert not PART1 & set(served)


def test_verification_can_be_read_past_only_by_the_benchmark_switch(tmp_path: Path, monkeypatch: Any) -> None:
    """The damage is real: with the checks off (the benchmark's baseline) the edited JSONL part serves
    the duplicate id, as the issue measured."""
    out = transform_output(tmp_path, SIZES, "jsonl")
    part = Path(out) / "part-00001.jsonl"
    part.write_bytes(part.read_bytes().replace(b'"id":55,', b'"id":56,', 1))
    monkeypatch.setattr(_verify, "VERIFY", False)
    ids = [int(r["id"]) for r in OutputDataset(out)]
    assert ids.count(56) == 2 and 55 not in ids


# ---- item 3: manifest paths stay inside the output -------------------------------------------


def _edit_part_path(out: str, new: str, secret: Path) -> None:
    path = Path(out) / "_SUCCESS"
    m = orjson.loads(path.read_bytes())
    u = m["units"][1]
    data = secret.read_bytes()
    u["outputs"] = [new]
    u["files"] = [{"path": new, "size": len(data), "xxh3_128": sum_bytes(data)}]
    path.write_bytes(orjson.dumps(m))


@pytest.mark.parametrize(
    "new, why",
    [
        ("../secret.jsonl", "has a '..'"),
        ("sub/../../secret.jsonl", "has a '..'"),
        ("{secret}", "it is absolute"),
        ("file://{secret}", "it is absolute"),
    ],
)
def test_a_manifest_path_leading_out_of_the_output_is_refused(tmp_path: Path, new: str, why: str) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(b'{"id":1000,"text":"secret"}\n')
    new = new.format(secret=secret)
    _edit_part_path(out, new, secret)
    entry = re.escape(new)
    msg = rf"_SUCCESS: unit 1 files entry '{entry}' points outside the output directory \(.*{why}.*{FIX}"
    with pytest.raises(OutsideOutputError, match=msg):
        OutputDataset(out)
    with pytest.raises(OutsideOutputError, match=msg):
        OutputDataset.map_style(out)


def test_a_split_path_leading_out_of_the_output_is_refused(tmp_path: Path) -> None:
    from data_testutil import split_output

    out = split_output(tmp_path, SIZES)
    path = Path(out) / "_SUCCESS"
    m = orjson.loads(path.read_bytes())
    u = m["units"][0]
    u["outputs"] = ["train/../../secret.jsonl", *u["outputs"][1:]]
    path.write_bytes(orjson.dumps(m))
    with pytest.raises(
        OutsideOutputError, match=r"unit 0 output 'train/\.\./\.\./secret.jsonl' points outside"
    ):
        OutputDataset(out, split="train")


@pytest.mark.parametrize("which", ["part", "index"])
def test_a_symlink_leading_out_of_the_output_is_refused(tmp_path: Path, which: str) -> None:
    """The part (or its tar index) replaced by a symlink to the same file outside: only the link is wrong."""
    out = tmp_path / "out-wds"
    run_op("transform", make_input(tmp_path, SIZES), out, "--output_format", "webdataset", fn=with_tensor)
    inside = out / ("part-00001.tar" if which == "part" else "_index/part-00001.tar.idx")
    outside = tmp_path / "elsewhere" / inside.name
    outside.parent.mkdir()
    os.replace(inside, outside)
    os.symlink(outside, inside)
    msg = rf"{inside.name} \(listed in .*_SUCCESS\) resolves to .*elsewhere.*outside the output directory"
    with pytest.raises(OutsideOutputError, match=msg):
        list(OutputDataset(str(out)))
    with pytest.raises(OutsideOutputError, match=msg):
        OutputDataset.map_style(str(out))[45]
    batches = _workers(str(out))
    try:
        with pytest.raises(OutsideOutputError, match="outside the output directory"):
            list(batches)
    finally:
        _stop(batches)


def test_a_symlink_inside_the_output_is_followed(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    inside = Path(out) / "part-00001.jsonl"
    moved = Path(out) / "moved" / inside.name
    moved.parent.mkdir()
    os.replace(inside, moved)
    os.symlink(moved, inside)
    assert sorted(int(r["id"]) for r in OutputDataset(out)) == list(range(sum(SIZES)))


# ---- the pieces ------------------------------------------------------------------------------


def test_block_hasher_matches_whole_bytes_for_any_write_sizes() -> None:
    rng = random.Random(0)
    data = os.urandom(5 * blocksums.BLOCK + 1234)
    for _ in range(5):
        h, pos = blocksums.BlockHasher(), 0
        while pos < len(data):
            n = rng.choice([1, 511, blocksums.BLOCK, 3 * blocksums.BLOCK + 7, 100_000])
            h.update(data[pos : pos + n])
            pos += n
        assert blocksums.encode(len(data), h.digests()) == blocksums.of_bytes(data)
    block, digests = blocksums.decode(blocksums.of_bytes(data), len(data))
    assert block == blocksums.BLOCK and len(digests) == 8 * 6
    with pytest.raises(ValueError, match="describes"):
        blocksums.decode(blocksums.of_bytes(data), len(data) + 1)


def test_verified_reads_return_the_bytes_asked_for(tmp_path: Path) -> None:
    from torchx_datapipes.data._parts import Part

    data = os.urandom(3 * blocksums.BLOCK + 999)
    f = tmp_path / "p.bin"
    f.write_bytes(data)
    _, digests = blocksums.decode(blocksums.of_bytes(data), len(data))
    part = Part(str(f), "p.bin", len(data), 1)
    rng = random.Random(1)
    reads: List[Callable[[Any, int, int], bytes]] = [
        lambda v, a, b: (v.seek(a), v.read(b - a))[1],
        lambda v, a, b: bytes(v.read_array(a, b)),
    ]
    for zero_copy in (False, True):
        with _verify.VerifiedFile(part, open(f, "rb"), blocksums.BLOCK, digests, zero_copy) as v:
            for _ in range(200):
                a = rng.randrange(len(data))
                b = min(len(data), a + rng.choice([1, 100, blocksums.BLOCK, 2 * blocksums.BLOCK + 5]))
                assert bytes(rng.choice(reads)(v, a, b)) == data[a:b]
            v.seek(0)
            assert bytes(v.read()) == data


def drifting_type(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": r["id"], "v": r["id"] if r["id"] < 40 else float(r["id"])}


def test_a_parquet_part_rewritten_at_commit_gets_new_block_sums(tmp_path: Path) -> None:
    out = tmp_path / "out-pq"
    m = run_op("transform", make_input(tmp_path, SIZES), out, "--output_format", "parquet", fn=drifting_type)
    assert m["parquet_schema"]["rewritten_parts"] == 1  # part 0 (int64 v) rewritten as double
    data = (out / "part-00000.parquet").read_bytes()
    assert (out / "_index" / "part-00000.parquet.sums").read_bytes() == blocksums.of_bytes(data)
    recs = list(OutputDataset(str(out)))
    assert sorted(int(r["id"]) for r in recs) == list(range(sum(SIZES)))
    assert all(isinstance(r["v"], float) for r in recs)


@pytest.mark.parametrize("fmt", ["jsonl", "webdataset"])
def test_parts_above_the_in_memory_limit_are_verified_block_by_block(
    tmp_path: Path, monkeypatch: Any, fmt: str
) -> None:
    """Large parts are indexed from blockwise reads (JSON Lines) or by tarfile over the verified file
    (a tar without its committed index), never from one whole read: both paths verify too."""
    monkeypatch.setattr(_formats, "PART_BYTES_LIMIT", 1000)
    monkeypatch.setattr(_formats, "INDEX_BLOCK", 3000)  # not a block multiple: reads straddle blocks
    sizes = [40, 3000, 30]  # part 1 spans several 64 KiB blocks
    out = tmp_path / "out"
    fn = with_tensor if fmt == "webdataset" else ident
    run_op("transform", make_input(tmp_path, sizes), out, "--output_format", fmt, fn=fn)
    if fmt == "webdataset":
        m = orjson.loads((out / "_SUCCESS").read_bytes())
        for u in m["units"]:
            u["files"] = [f for f in u["files"] if not f["path"].endswith(".tar.idx")]
        (out / "_SUCCESS").write_bytes(orjson.dumps(m))
    assert sorted(int(r["id"]) for r in OutputDataset(str(out))) == list(range(sum(sizes)))
    part = next(out.glob("part-00001.*"))
    data = bytearray(part.read_bytes())
    assert len(data) > 2 * blocksums.BLOCK
    at = len(data) // 2 if fmt == "jsonl" else data.index(b"\x93NUMPY", len(data) // 2) + 130
    data[at] ^= 0x04
    part.write_bytes(bytes(data))
    _registry.clear_caches()
    with pytest.raises(PartModifiedError, match=r"part-00001\.\w+: bytes \d+-\d+ \(block [1-9]\d* of"):
        list(OutputDataset(str(out)))


def test_a_modified_local_copy_under_cache_dir_is_refused(tmp_path: Path) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    cache = tmp_path / "cache"
    assert len(list(OutputDataset(out, cache_dir=str(cache)))) == sum(SIZES)
    (copy,) = [p for p in cache.rglob("part-00001.jsonl")]
    copy.write_bytes(copy.read_bytes().replace(b'"id":55,', b'"id":56,', 1))
    _registry.clear_caches()  # as in a new process
    served = _served(lambda: OutputDataset(out, cache_dir=str(cache)))
    assert not PART1 & set(served)
    with pytest.raises(PartModifiedError, match=f"of its local copy {re.escape(str(copy))} \\(delete it"):
        list(OutputDataset(out, cache_dir=str(cache)))
