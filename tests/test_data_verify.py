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

from torchx_datapipes.data import OutputDataset
from torchx_datapipes.data._parts import OutsideOutputError
from torchx_datapipes.formats import chunks as _formats
from torchx_datapipes.formats import registry as _registry
from torchx_datapipes.formats.webdataset.tarindex import decode
from torchx_datapipes.io import blocksums
from torchx_datapipes.io import verify as _verify
from torchx_datapipes.io.checksum import sum_bytes
from torchx_datapipes.io.verify import PartModifiedError

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


# ---- the tar path reads and hashes each block once per chunk (read_arrays) -------------------


class _CountingXxhash:
    """``xxhash`` as ``_verify`` uses it, counting the blocks it digests and the bytes it hashes."""

    def __init__(self) -> None:
        import xxhash

        self._x, self.digests, self.hashed = xxhash, 0, 0

    def xxh3_64_digest(self, data: Any) -> bytes:
        self.digests += 1
        self.hashed += len(memoryview(data))
        return bytes(self._x.xxh3_64_digest(data))

    def xxh3_64(self) -> Any:
        outer, h = self, self._x.xxh3_64()

        class _Streaming:
            def update(self, data: Any) -> None:
                outer.hashed += len(memoryview(data))
                h.update(data)

            def digest(self) -> bytes:
                outer.digests += 1
                return bytes(h.digest())

        return _Streaming()

    def xxh3_128(self) -> Any:
        return self._x.xxh3_128()


def _blocks(ranges: List[Any]) -> set:
    b = blocksums.BLOCK
    return {k for lo, hi in ranges if hi > lo for k in range(lo // b, -(-hi // b))}


def with_vector(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": r["id"], "x": np.full(1000, float(r["id"]), np.float32)}  # ~4 KB .npy members


TAR_RECORDS = 400


@pytest.fixture
def small_pieces(monkeypatch: Any) -> None:
    """~100 KB pieces (so most 64 KiB blocks straddle two pieces) and ~600 KB chunks."""
    from torchx_datapipes.formats.webdataset import reader as _tar

    monkeypatch.setattr(_tar, "PIECE_BYTES", 100_000)
    monkeypatch.setattr(_formats, "CHUNK_BYTES", 600_000)


def _tar_chunks(out: Path) -> List[List[Any]]:
    """The byte ranges of each chunk's pieces of the (only) part, as the reader reads them."""
    from torchx_datapipes.formats.webdataset import reader as _tar

    ds = OutputDataset(str(out))
    (part,) = ds._parts
    index = _tar.TarFormat()._index(part, _formats.ReadOptions())
    return [
        [(lo, hi) for _, _, lo, hi in _tar._pieces(index, *_formats.chunk_span(part, c))]
        for c in range(len(_formats.fixed_chunks(part)))
    ]


def _one_tar_part(tmp_path: Path) -> Path:
    out = tmp_path / "out-wds"
    run_op(
        "transform", make_input(tmp_path, [TAR_RECORDS]), out, "--output_format", "webdataset", fn=with_vector
    )
    return out


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("copy", [False, True], ids=["part", "cache_dir-copy"])
def test_a_flipped_byte_in_a_block_two_pieces_share_is_refused_on_every_path(
    tmp_path: Path, where: str, copy: bool
) -> None:
    """A byte of an ``.npy`` member flipped in a block that two ~100 KB pieces of one chunk share (in
    the earlier piece's part of it, or the later's), in the part or in its local copy under cache_dir:
    the iterable (in order and shuffled) serves no record of that chunk, map-style refuses the record."""
    out = _one_tar_part(tmp_path)
    chunks = _tar_chunks(out)
    assert len(chunks) >= 3 and all(len(c) >= 3 for c in chunks[:-1])
    b = blocksums.BLOCK
    cut = chunks[1][1][0]  # the second piece of the second chunk starts here, inside block k
    k = cut // b
    assert chunks[1][0][1] > k * b, "the first piece ends in block k too: the block is shared"
    index = decode(
        (out / "_index" / "part-00000.tar.idx").read_bytes(),
        (out / "part-00000.tar").stat().st_size,
        TAR_RECORDS,
    )
    npy = [m for m in range(len(index.sids)) if index.suffixes[index.sids[m]] == "x.npy"]
    if where == "before":  # the last byte of a member ending in block k before the cut
        m = next(m for m in npy if k * b < index.offsets[m] + index.sizes[m] <= cut)
        at = index.offsets[m] + index.sizes[m] - 1
    else:  # the first data byte of a member starting in block k after the cut
        m = next(m for m in npy if cut <= index.offsets[m] < (k + 1) * b)
        at = index.offsets[m] + index.sizes[m] - 4
    row = next(r for r in range(TAR_RECORDS) if index.starts[r] <= m < index.starts[r + 1])
    assert at // b == k
    per_chunk = _formats.chunk_records(OutputDataset(str(out))._parts[0])
    kw: Dict[str, Any] = {}
    target = out / "part-00000.tar"
    if copy:
        kw["cache_dir"] = str(tmp_path / "cache")
        assert len(list(OutputDataset(str(out), **kw))) == TAR_RECORDS  # makes the local copy
        (target,) = list((tmp_path / "cache").rglob("part-00000.tar"))
    data = bytearray(target.read_bytes())
    data[at] ^= 0x10
    target.write_bytes(bytes(data))
    _registry.clear_caches()
    msg = rf"part-00000\.tar: bytes {k * b}-{(k + 1) * b} \(block {k} of \d+\)"
    msg += " of its local copy" if copy else " do not match"
    served: List[int] = []
    with pytest.raises(PartModifiedError, match=msg):
        for rec in OutputDataset(str(out), read_ahead=0, **kw):
            served.append(int(rec["id"]))
    assert served == list(range(per_chunk)), "only the chunk before the damaged one is served"
    shuffled: List[int] = []
    with pytest.raises(PartModifiedError, match=msg):
        for rec in OutputDataset(str(out), shuffle=True, seed=5, **kw):
            shuffled.append(int(rec["id"]))
    assert not set(range(per_chunk, 2 * per_chunk)) & set(shuffled)
    ms = OutputDataset.map_style(str(out), **kw)
    with pytest.raises(PartModifiedError, match=msg):
        ms[row]
    with pytest.raises(PartModifiedError, match=msg):
        ms.__getitems__([0, row - 1, row, row + 1])
    far = TAR_RECORDS - 1
    assert [int(r["id"]) for r in ms.__getitems__([0, far])] == [0, far]
    assert float(ms[far]["x"][0]) == far


@pytest.mark.usefixtures("small_pieces")
def test_the_tar_path_hashes_each_block_once_per_chunk(tmp_path: Path, monkeypatch: Any) -> None:
    """Reading every chunk digests each block under its pieces once (not once per piece), and map-style
    reads of neighbouring rows digest their shared blocks once: counted by hash calls, not timed."""
    out = _one_tar_part(tmp_path)
    chunks = _tar_chunks(out)
    per_chunk = sum(len(_blocks(c)) for c in chunks)
    per_piece = sum(len(_blocks([r])) for c in chunks for r in c)
    assert per_piece > per_chunk + len(chunks)  # pieces share blocks: hashing per piece would repeat them
    counter = _CountingXxhash()
    monkeypatch.setattr(_verify, "xxhash", counter)
    ids = [int(r["id"]) for r in OutputDataset(str(out))]
    assert ids == list(range(TAR_RECORDS))
    assert counter.digests == per_chunk
    b, size = blocksums.BLOCK, (out / "part-00000.tar").stat().st_size
    assert counter.hashed == sum(min(b, size - k * b) for c in chunks for k in _blocks(c))

    index = decode((out / "_index" / "part-00000.tar.idx").read_bytes(), size, TAR_RECORDS)
    rows = [10, 11, 13, 14]  # three runs, all within a few blocks
    touched = _blocks(
        [
            (
                index.offsets[index.starts[a]],
                index.offsets[index.starts[z] - 1] + index.sizes[index.starts[z] - 1],
            )
            for a, z in [(10, 12), (13, 15)]
        ]
    )
    counter.digests = 0
    assert [int(r["id"]) for r in OutputDataset.map_style(str(out)).__getitems__(rows)] == rows
    assert counter.digests == len(touched)


def test_read_arrays_returns_the_bytes_asked_for_hashing_each_block_once(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Random increasing ranges (touching, overlapping blocks, gaps, empty ones): the bytes asked for,
    one digest per block under them; a flipped byte in any block under them is refused, named."""
    from torchx_datapipes.data._parts import Part

    b = blocksums.BLOCK
    data = os.urandom(9 * b + 777)
    f = tmp_path / "p.bin"
    f.write_bytes(data)
    _, digests = blocksums.decode(blocksums.of_bytes(data), len(data))
    part = Part(str(f), "p.bin", len(data), 1)
    rng = random.Random(2)
    counter = _CountingXxhash()
    monkeypatch.setattr(_verify, "xxhash", counter)
    for step in (1, 4, 100):
        monkeypatch.setattr(_verify, "STEP_BLOCKS", step)
        for _ in range(60):
            cuts = sorted(rng.sample(range(len(data) + 1), 2 * rng.randint(1, 8)))
            ranges = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts), 2)]
            ranges.insert(rng.randrange(len(ranges) + 1), (cuts[0], cuts[0]))  # an empty range
            counter.digests = 0
            with _verify.VerifiedFile(part, open(f, "rb"), b, digests) as v:
                got = v.read_arrays(ranges)
            assert [bytes(a) for a in got] == [data[lo:hi] for lo, hi in ranges]
            assert all(a.flags.writeable for a in got)
            assert counter.digests == len(_blocks(ranges))
    bad = bytearray(data)
    bad[5 * b + 3] ^= 1
    f.write_bytes(bytes(bad))
    for ranges in (
        [(5 * b - 10, 5 * b + 1)],
        [(4 * b, 5 * b - 1), (5 * b + 100, 5 * b + 200)],
        [(0, len(data))],
    ):
        with _verify.VerifiedFile(part, open(f, "rb"), b, digests) as v:
            with pytest.raises(PartModifiedError, match=rf"bytes {5 * b}-{6 * b} \(block 5 of 10\)"):
                v.read_arrays(ranges)
    with _verify.VerifiedFile(part, open(f, "rb"), b, digests) as v:
        assert [bytes(a) for a in v.read_arrays([(0, 5 * b), (6 * b, 6 * b + 9)])] == [
            data[: 5 * b],
            data[6 * b : 6 * b + 9],
        ]


def test_jsonl_rows_beyond_the_in_memory_limit_hash_shared_blocks_once(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Map-style JSON Lines rows read by byte range (a part above the in-memory limit): runs of rows
    sharing blocks digest each block once, and an edited line among them is refused."""
    monkeypatch.setattr(_formats, "PART_BYTES_LIMIT", 1000)
    out = transform_output(tmp_path, [3000], "jsonl")
    part = Path(out) / "part-00000.jsonl"
    data = part.read_bytes()
    assert len(data) > 2 * blocksums.BLOCK
    starts = [0] + [i + 1 for i, c in enumerate(data) if c == 10]
    m = OutputDataset.map_style(out)
    b = blocksums.BLOCK
    row = next(r for r in range(3000) if starts[r] < b < starts[r + 1])  # the line across blocks 0 and 1
    rows = [row - 3, row - 1, row, row + 2, row + 5]
    touched = _blocks([(starts[r], starts[r + 1]) for r in rows])
    assert touched == {0, 1}
    assert int(m[0]["id"]) == 0  # the line index is built by one pass over the part, hashing it
    counter = _CountingXxhash()
    monkeypatch.setattr(_verify, "xxhash", counter)
    assert [int(r["id"]) for r in m.__getitems__(rows)] == rows
    assert counter.digests == 2
    part.write_bytes(data.replace(f'"id":{row + 5},'.encode(), f'"id":{row + 6},'.encode(), 1))
    _registry.clear_caches()
    with pytest.raises(PartModifiedError, match=r"bytes 65536-131072 \(block 1 of"):
        OutputDataset.map_style(out).__getitems__(rows)
