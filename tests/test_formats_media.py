"""Issue 10: files (images, audio, blobs) and WebDataset tar shards as input."""

import io
import tarfile
import wave
from pathlib import Path
from typing import Any, Dict, List, Tuple

import orjson
import pytest
from tdp_testutil import read_output, run_op

from torchx_datapipes.formats.planning import plan_units
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.formats.webdataset.codec import member_field
from torchx_datapipes.io.fs import expand_input_files

Image = pytest.importorskip("PIL.Image")


def describe(r: Dict[str, Any]) -> Dict[str, Any]:
    """What a user's function would do with the bytes: decode them."""
    import io as _io
    import wave as _wave

    from PIL import Image as _Image

    if r["path"].endswith(".wav"):
        with _wave.open(_io.BytesIO(r["bytes"])) as w:
            return {"path": r["path"], "frames": w.getnframes(), "rate": w.getframerate(), "size": r["size"]}
    with _Image.open(_io.BytesIO(r["bytes"])) as im:
        return {"path": r["path"], "wh": list(im.size), "mode": im.mode, "size": r["size"]}


def media_dir(root: Path) -> Path:
    root.mkdir(parents=True)
    for i in range(4):
        Image.new("RGB", (8 + i, 5), (10 * i, 0, 0)).save(root / f"img{i}.png")
    (root / "sub").mkdir()
    with wave.open(str(root / "sub/tone.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x01\x00" * 800)
    return root


def test_directory_of_png_and_wav_is_one_record_per_file(tmp_path: Path) -> None:
    d = media_dir(tmp_path / "media")
    m = run_op("transform", str(d), tmp_path / "o", "--num_workers", "2", fn=describe)
    out = sorted(read_output(tmp_path / "o"), key=lambda r: r["path"])
    assert [Path(r["path"]).name for r in out] == ["img0.png", "img1.png", "img2.png", "img3.png", "tone.wav"]
    assert out[2]["wh"] == [10, 5] and out[2]["mode"] == "RGB"
    assert out[4]["frames"] == 800 and out[4]["rate"] == 8000
    assert all(r["size"] == Path(r["path"]).stat().st_size for r in out)
    assert m["records_in"] == 5 and m["bad"] == 0


def test_files_are_grouped_into_units_by_size_from_the_input_alone(tmp_path: Path) -> None:
    d = media_dir(tmp_path / "media")
    files = [(f.url, f.size, f.mtime) for f in expand_input_files([str(d)])]
    one = plan_units(files, "files", unit_mb=64)
    assert len(one) == 1 and len(one[0].read["files"]) == 5 and one[0].nbytes == sum(s for _, s, _ in files)
    small = plan_units(files, "files", unit_mb=(files[0][1] + files[1][1]) / 2**20)
    assert [len(u.read["files"]) for u in small][0] == 2 and sum(len(u.read["files"]) for u in small) == 5
    assert small == plan_units(files, "files", unit_mb=(files[0][1] + files[1][1]) / 2**20)  # deterministic
    readers = [UnitReader(u) for u in small]
    assert readers[0].location(2) == (files[1][0], 1)  # a group's location names the file itself
    recs = [r for rd in readers for b, _ in rd.batches() for r in b]
    assert [r["path"] for r in recs] == [f[0] for f in files]
    assert recs[0]["bytes"] == Path(files[0][0]).read_bytes()


def test_a_unit_holds_at_most_max_files_per_unit_files(tmp_path: Path) -> None:
    """Many small files are not one unit however large --unit_mb is: decoding is the cost, not bytes."""
    from torchx_datapipes.formats.files import MAX_FILES_PER_UNIT

    n = 8 * MAX_FILES_PER_UNIT + 3
    files = [(str(tmp_path / f"f{i:04d}.bin"), 10, 1.0) for i in range(n)]
    units = plan_units(files, "files", unit_mb=64)
    sizes = [len(u.read["files"]) for u in units]
    # files 1795.. (the last eighth, n // 8 = 256) go in quarter units, so dynamic workers finish
    # together; the unit that holds file 1795 (it starts at 1792) stops at a quarter as well
    quarter = MAX_FILES_PER_UNIT // 4
    assert sizes == [MAX_FILES_PER_UNIT] * 7 + [quarter] * 4 + [3]
    assert [f[0] for u in units for f in u.read["files"]] == [f[0] for f in files]


def make_shard(path: Path, members: List[Tuple[str, bytes]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (i + 1, 2)).save(buf, "PNG")
    return buf.getvalue()


MEMBERS = [
    (name, data)
    for k in ("000", "001", "dir/002.v2")
    for name, data in ((f"{k}.png", png(len(k))), (f"{k}.cls", b"7"), (f"{k}.meta.JSON", b'{"k": 1}'))
] + [("__meta__", b"skipped")]  # fmt: skip


@pytest.mark.parametrize("name, mode", [("shard.tar", "w"), ("shard.tar.gz", "w:gz")])
def test_webdataset_shard_matches_the_webdataset_package(tmp_path: Path, name: str, mode: str) -> None:
    wds = pytest.importorskip("webdataset")
    shard = make_shard(tmp_path / name, MEMBERS, mode)
    (unit,) = plan_units([(str(shard), shard.stat().st_size)])
    assert unit.format == "webdataset"
    ours = [r for b, _ in UnitReader(unit).batches() for r in b]
    # the package's samples decoded by its default decoders (.cls -> int, .json -> value, images
    # kept as bytes), fields named as OutputDataset names them (``meta.json`` -> ``meta``)
    theirs = [
        {
            (k if k == "__key__" else member_field(k)): v
            for k, v in s.items()
            if k == "__key__" or not k.startswith("__")
        }
        for s in wds.WebDataset(str(shard), shardshuffle=False).decode()
    ]
    assert ours == theirs
    assert [r["__key__"] for r in ours] == ["000", "001", "dir/002"] and ours[2]["v2.png"] == png(10)
    assert set(ours[0]) == {"__key__", "png", "cls", "meta"} and ours[0]["cls"] == 7


def keys_and_shapes(r: Dict[str, Any]) -> Dict[str, Any]:
    import io as _io

    from PIL import Image as _Image

    with _Image.open(_io.BytesIO(r["png"])) as im:
        return {"key": r["__key__"], "wh": list(im.size), "cls": int(r["cls"])}


def test_webdataset_transform_and_a_duplicate_member_is_a_bad_record(tmp_path: Path) -> None:
    d = tmp_path / "shards"
    d.mkdir()
    make_shard(d / "a.tar", MEMBERS[:6])
    make_shard(
        d / "b.tar", [("x.png", png(3)), ("x.cls", b"1"), ("x.cls", b"2"), ("y.png", png(4)), ("y.cls", b"0")]
    )
    m = run_op(
        "transform", str(d), tmp_path / "o", "--on_error", "skip", "--max_error_rate", "1", fn=keys_and_shapes
    )
    assert read_output(tmp_path / "o") == [
        {"key": "000", "wh": [4, 2], "cls": 7}, {"key": "001", "wh": [4, 2], "cls": 7},
        {"key": "y", "wh": [5, 2], "cls": 0},
    ]  # fmt: skip
    assert m["bad"] == 1
    (err,) = [orjson.loads(x) for x in (tmp_path / "o/_errors/part-00001.jsonl").read_bytes().splitlines()]
    assert err["file"] == str(d / "b.tar") and err["line"] == 1
    assert "'x.cls' twice" in err["error"] and err["raw"] == "x.png, x.cls, x.cls"
