"""Issue 32, item 2: a WebDataset output read as the next job's ``--input`` keeps its field names.

Our writer writes each field name as a member suffix (``<key>.Action.json``); the ``--input``
reader used to lower-case suffixes as the ``webdataset`` package does, so ``Action`` came back
as ``action`` while ``OutputDataset`` kept it. Both readers must give back the names as written,
with the same values and types; a third-party shard's suffixes are read as written too.
"""

import io
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.data import OutputDataset


class _Fields:
    """A transform writing mixed-case field names (only what a WebDataset member suffix can hold)."""

    def __call__(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        i = rec["i"]
        return {
            "Action": i,
            "idNum": f"x{i}",
            "Value.X": i + 0.5,
            "TagList": [i, "A"],
            "Emb": np.arange(3, dtype=np.float32) + i,
            "Raw.BIN": bytes([i, 255]),
            "Doc.JSON": {"a": i},  # a value extension in another case is part of the name
            "Vec.NPY": np.arange(2, dtype=np.int16) * i,
        }


class _Same:
    """The record as the job got it (bytes as hex: JSON Lines has no bytes), and its field types."""

    def __call__(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        fields = {k: v for k, v in rec.items() if k != "__key__"}
        out = {k: v.hex() if isinstance(v, bytes) else v for k, v in fields.items()}
        return {**out, "seen": {k: type(v).__name__ for k, v in fields.items()}}


def _described(rec: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in rec.items():
        if k == "__key__":
            continue
        if isinstance(v, torch.Tensor):
            out[k] = ("tensor", str(v.dtype), v.tolist())
        else:
            out[k] = (type(v).__name__, v)
    return out


def _by_action(out: Path) -> Dict[int, Dict[str, Any]]:
    return {rec["Action"]: _described(rec) for rec in OutputDataset(str(out))}


def test_next_jobs_webdataset_input_keeps_field_names_values_and_types(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in/rows.jsonl", [{"i": i} for i in range(5)])
    wds = tmp_path / "wds"
    run_op("transform", str(inp), wds, "--output_format", "webdataset", fn=_Fields())
    members = [n for p in sorted(wds.glob("part-*.tar")) for n in tarfile.open(p).getnames()]
    assert any(n.endswith(".Action.json") for n in members), members
    first = _by_action(wds)
    assert set(first[1]) == {"Action", "idNum", "Value.X", "TagList", "Emb", "Raw.BIN", "Doc.JSON", "Vec.NPY"}
    assert first[2]["Doc.JSON"] == ("dict", {"a": 2}) and first[2]["Vec.NPY"][:2] == ("tensor", "torch.int16")
    again = tmp_path / "again"
    run_op(
        "transform", str(wds), again, "--format", "webdataset", "--output_format", "jsonl", fn=_Same()
    )  # fmt: skip
    second = {rec["Action"]: rec for rec in OutputDataset(str(again))}
    assert sorted(second) == sorted(first)
    for action, want in first.items():
        got = dict(second[action])
        seen = got.pop("seen")
        assert seen == {k: "Tensor" if v[0] == "tensor" else v[0] for k, v in want.items()}
        got["Raw.BIN"] = bytes.fromhex(got["Raw.BIN"])
        assert _described(got) == want
    assert first[3]["Action"] == ("int", 3) and first[3]["idNum"] == ("str", "x3")
    assert first[3]["Value.X"] == ("float", 3.5) and first[3]["Raw.BIN"] == ("bytes", bytes([3, 255]))
    assert first[3]["Emb"] == ("tensor", "torch.float32", [3.0, 4.0, 5.0])


def _shard(path: Path, members: List[tuple]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_a_third_party_shards_suffixes_are_read_as_written(tmp_path: Path) -> None:
    shard = _shard(
        tmp_path / "in/shard-000.tar",
        [
            ("s0.JPG", b"\xff\xd8img"),
            ("s0.CLS", b"4"),
            ("s0.Caption.TXT", "Hé".encode()),
            ("s0.json", b"[1]"),
        ],
    )
    out = tmp_path / "o"
    run_op("transform", str(shard), out, "--format", "webdataset", "--output_format", "jsonl", fn=_Same())
    (rec,) = list(OutputDataset(str(out)))
    assert rec["seen"] == {"JPG": "bytes", "CLS": "int", "Caption.TXT": "str", "json": "list"}
    assert (rec["JPG"], rec["CLS"], rec["Caption.TXT"], rec["json"]) == ("ffd8696d67", 4, "Hé", [1])
