"""Issue 12, the read side: no input is lost, truncated or changed input is never read silently,
values survive exactly, and every input failure names the file and line."""

import hashlib
import os
from pathlib import Path
from typing import Any, Dict

import pytest
from tdp_testutil import make_dataset

from torchx_datapipes import artifact, components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.runner.main import main


def identity(r: Any) -> Any:
    return r


def transform(tmp: Path, inp: str, out: str, *extra: str, fn: Any = identity) -> Dict[str, Any]:
    """The runner in-process with the artifact stored outside input and output."""
    ref = artifact.package(fn, str(tmp / "store"))
    args = ["transform", "--input", inp, "--output", out, "--progress_s", "0"]
    m = main([*args, "--artifact", ref.url, "--sha256", ref.sha256, *extra])
    assert m is not None
    return m


def _digest(root: Path) -> Dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# -- 1. the output never overlaps an input ------------------------------------------------------
@pytest.mark.parametrize(
    "output",
    ["data/in/.", "data/x/../in", "data//in", "link_to_in", "data/in/sub", "data", "data/in/a.jsonl"],
)
def test_overlapping_output_is_refused_and_input_survives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data/in", [20, 5])
    (tmp_path / "data/in/a.jsonl").write_bytes((tmp_path / "data/in/part-0.jsonl").read_bytes())
    (tmp_path / "data/x").mkdir()
    os.symlink(tmp_path / "data/in", tmp_path / "link_to_in")
    before = _digest(tmp_path / "data")
    with pytest.raises(ValueError, match="--output") as info:
        transform(tmp_path, "data/in", output, "--overwrite", "True")
    assert "outside every input" in str(info.value)
    assert _digest(tmp_path / "data") == before  # no input byte changed or added
    # the client refuses it too, before packaging or launching anything
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    with pytest.raises(InvalidArgumentError, match="outside every input"):
        components.transform(fn="t.py:f", input="data/in", output=output, overwrite=True)
    assert _digest(tmp_path / "data") == before


def test_glob_input_with_output_beside_it_is_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [4])
    m = transform(tmp_path, "data/*.jsonl", "data/out")
    assert m["records_out"] == 4
    with pytest.raises(ValueError, match="lies inside --output"):
        transform(tmp_path, "data/*.jsonl", ".", "--overwrite", "True")


def test_client_checks_remote_inputs_without_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    for inp, out in [
        ("s3://bucket/data/in", "s3://bucket/data/in/./out"),
        ("s3://bucket/data/in/*.jsonl", "s3://bucket//data"),
        ("s3://bucket/data/in", "s3://bucket/data/x/../in"),
    ]:
        with pytest.raises(InvalidArgumentError, match="outside every input"):
            components.transform(fn="t.py:f", input=inp, output=out, overwrite=True)
