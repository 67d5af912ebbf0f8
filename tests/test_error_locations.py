"""Bad records of multi-file units name the record's own file (a group of files) or members (a shard).

Regression for issue 10: ``_errors/`` entries and ``on_error=raise`` messages of a group of
files named the unit's FIRST file, whatever file the record came from.
"""

import io
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest
from PIL import Image
from tdp_testutil import read_output, run_op

from torchx_datapipes.runner.badrecords import RecordError

BAD = "img3.png"


def png_dir(root: Path, n: int = 5) -> List[Path]:
    """``n`` small PNGs in one directory: one unit of ``n`` files (they are far below --unit_mb)."""
    root.mkdir(parents=True)
    paths = []
    for i in range(n):
        p = root / f"img{i}.png"
        Image.new("RGB", (4 + i, 3), (40 * i, 0, 0)).save(p)
        paths.append(p)
    return paths


def width_unless_bad(r: Dict[str, Any]) -> Dict[str, Any]:
    import io as _io

    from PIL import Image as _Image

    if r["path"].endswith("img3.png"):
        raise ValueError("this image is bad")
    with _Image.open(_io.BytesIO(r["bytes"])) as im:
        return {"path": r["path"], "w": im.size[0]}


def errors(out: Path) -> List[Dict[str, Any]]:
    return [orjson.loads(x) for p in sorted((out / "_errors").glob("*")) for x in p.read_bytes().splitlines()]


def test_skip_names_the_bad_file_of_a_group(tmp_path: Path) -> None:
    paths = png_dir(tmp_path / "imgs")
    m = run_op(
        "transform", str(tmp_path / "imgs"), tmp_path / "o", "--on_error", "skip", "--max_error_rate", "1",
        fn=width_unless_bad,
    )  # fmt: skip
    assert len(m["units"]) == 1 and m["bad"] == 1 and m["records_out"] == 4
    (err,) = errors(tmp_path / "o")
    assert err["file"] == str(paths[3]) and err["line"] == 1 and err["stage"] == "transform"
    assert "ValueError: this image is bad" in err["error"] and "members" not in err
    assert sorted(r["w"] for r in read_output(tmp_path / "o")) == [4, 5, 6, 8]


def test_raise_names_the_bad_file_of_a_group(tmp_path: Path) -> None:
    paths = png_dir(tmp_path / "imgs")
    with pytest.raises(RecordError) as e:
        run_op("transform", str(tmp_path / "imgs"), tmp_path / "o", fn=width_unless_bad)
    msg = str(e.value)
    assert msg.startswith(f"{paths[3]}, line 1: width_unless_bad raised ValueError: this image is bad"), msg
    assert str(paths[0]) not in msg.splitlines()[0]


def test_parquet_serialize_failure_names_the_file(tmp_path: Path) -> None:
    """A record the writer refuses (after the function) is traced to its own file too."""
    paths = png_dir(tmp_path / "imgs")

    def big_int_for_bad(r: Dict[str, Any]) -> Dict[str, Any]:
        return {"n": 2**70 if r["path"].endswith("img3.png") else 1}

    run_op(
        "transform", str(tmp_path / "imgs"), tmp_path / "o", "--output_format", "parquet",
        "--on_error", "skip", "--max_error_rate", "1", fn=big_int_for_bad,
    )  # fmt: skip
    (err,) = errors(tmp_path / "o")
    assert err["file"] == str(paths[3]) and err["stage"] == "serialize" and "64 bits" in err["error"]


def test_split_raise_names_the_files_of_the_batch(tmp_path: Path) -> None:
    paths = png_dir(tmp_path / "imgs")

    def keyed(r: Dict[str, Any]) -> Dict[str, Any]:
        return {"path": r["path"]} if r["path"].endswith("img3.png") else {"path": r["path"], "id": r["size"]}

    with pytest.raises(RecordError) as e:
        run_op(
            "split", str(tmp_path / "imgs"), tmp_path / "o", "--fractions", "a=0.5,b=0.5", "--method", "hash",
            "--key", "id", fn=keyed,
        )  # fmt: skip
    # a function's outputs are not traced to input records in split: the message spans the batch's files
    want = f"a record fn made from {paths[0]} line 1 to {paths[4]} line 1: cannot split: MissingKeyError"
    assert str(e.value).startswith(want), str(e.value)


def shard(path: Path, keys: List[str]) -> Path:
    with tarfile.open(path, "w") as tf:
        for k in keys:
            for ext, data in (("png", b"not really a png"), ("cls", k.encode())):
                info = tarfile.TarInfo(f"{k}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def fail_on_b(r: Dict[str, Any]) -> Dict[str, Any]:
    if r["__key__"] == "b":
        raise KeyError("no label for b")
    return {"key": r["__key__"]}


def test_webdataset_errors_name_the_sample_members(tmp_path: Path) -> None:
    d = tmp_path / "shards"
    d.mkdir()
    tar = shard(d / "s.tar", ["a", "b", "c"])
    run_op("transform", str(d), tmp_path / "o", "--on_error", "skip", "--max_error_rate", "1", fn=fail_on_b)
    (err,) = errors(tmp_path / "o")
    assert err["file"] == str(tar) and err["line"] == 2 and err["members"] == "b.png, b.cls"
    with pytest.raises(RecordError) as e:
        run_op("transform", str(d), tmp_path / "o2", fn=fail_on_b)
    assert str(e.value).startswith(f"{tar}, line 2 (members b.png, b.cls): fail_on_b raised KeyError"), str(
        e.value
    )
