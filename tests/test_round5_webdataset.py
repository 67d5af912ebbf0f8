"""Issue 32, item 9: a WebDataset ``__key__`` that would extract outside the target directory (an
absolute path, a ``..`` component) or holds a NUL is a bad record naming the input file, line and
key, and the fix; a key with plain directories is kept."""

import json
import tarfile
from pathlib import Path
from typing import Any, Dict, List

import pytest
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.errors import DatapipesError

KEYS = ["shard/ok_0", "../evil_1", "/tmp/evil_2", "a/../../evil_3", "nul\x00_4", "sub/../x_5", "plain_6"]
SAFE = {0, 6}


def keyed(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"__key__": r["key"], "id": r["id"], "txt": f"sample {r['id']}"}


@pytest.fixture
def inp(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "in/keys.jsonl", [{"id": i, "key": k} for i, k in enumerate(KEYS)])


def _errors(out: Path) -> List[Dict[str, Any]]:
    return [
        json.loads(x) for p in sorted((out / "_errors").glob("*.jsonl")) for x in p.read_text().splitlines()
    ]


def test_an_unsafe_key_is_fatal_naming_file_line_key_and_fix(tmp_path: Path, inp: Path) -> None:
    with pytest.raises(DatapipesError, match=r"keys\.jsonl, line 2: ") as e:
        run_op("transform", str(inp), tmp_path / "o", "--output_format", "webdataset", fn=keyed)
    msg = str(e.value)
    assert "__key__ '../evil_1'" in msg and "'..' path component" in msg
    assert "outside the target directory" in msg and "e.g. 'evil_1'" in msg


def test_unsafe_keys_are_skipped_and_the_shard_extracts_inside(tmp_path: Path, inp: Path) -> None:
    m = run_op(
        "transform", str(inp), tmp_path / "o", "--output_format", "webdataset", "--on_error", "skip",
        "--max_error_rate", "1", fn=keyed,
    )  # fmt: skip
    assert m["bad"] == len(KEYS) - len(SAFE) and m["records_out"] == len(SAFE)
    errs = _errors(tmp_path / "o")
    assert [e["line"] for e in errs] == [i + 1 for i in range(len(KEYS)) if i not in SAFE]
    why = {e["line"]: e["error"] for e in errs}
    assert "absolute path" in why[3] and "e.g. 'tmp/evil_2'" in why[3]
    assert "NUL character" in why[5] and "'..' path component" in why[6]
    for e in errs:
        assert e["file"].endswith("keys.jsonl") and e["stage"] == "serialize" and "__key__" in e["error"]
    (part,) = sorted((tmp_path / "o").glob("part-*.tar"))
    target = tmp_path / "x" / "target"
    target.mkdir(parents=True)
    with tarfile.open(part) as tf:
        names = tf.getnames()
        tf.extractall(target)  # no filter: what Python < 3.14 does by default
    assert sorted(names) == ["plain_6.id", "plain_6.txt", "shard/ok_0.id", "shard/ok_0.txt"]
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["target"]
    assert (target / "shard/ok_0.txt").read_text() == "sample 0"
