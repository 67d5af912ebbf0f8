"""The Python API builds the same AppDefs as the CLI, from Python-friendly arguments."""

from pathlib import Path

import pytest
from tdp_testutil import make_dataset

from torchx_datapipes import api


def test_python_values_become_cli_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [2, 2])
    inputs = ["data/part-0.jsonl", "data/part-1.jsonl"]
    fractions = {"train": 0.75, "val": 0.25}
    app = api.split(input=inputs, output="out", fractions=fractions, key=["id", "label"], j="1x1")
    cmd = app.roles[0].args[-1]
    assert "--input data/part-0.jsonl,data/part-1.jsonl" in cmd
    assert "--fractions train=0.75,val=0.25" in cmd and "--key id,label" in cmd
    cmd = (
        api.stats(input="data/*.jsonl", output="s", fields=["x", "y"], quantiles=[0.5, 0.9]).roles[0].args[-1]
    )
    assert "--fields x,y" in cmd and "--quantiles 0.5,0.9" in cmd


def test_live_callable_is_packaged_and_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [2])
    k = 3
    app = api.transform(lambda r: {**r, "k": k}, input="data/*.jsonl", output="out", j="1x1")
    cmd = app.roles[0].args[-1]
    [url] = [p for p in (tmp_path / ".tdp/artifacts").iterdir() if p.suffix == ".pkl"]
    assert f"--artifact {url}" in cmd and f"--sha256 {url.stem}" in cmd
    with pytest.raises(ValueError, match="sum to"):
        api.split(input="data/*.jsonl", output="o", fractions={"a": 0.5, "b": 0.6})
