"""The Python API builds the same AppDefs as the CLI, from Python-friendly arguments."""

import os
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
    here = os.getcwd()  # relative local paths are made absolute on the client (issue 13, section 4)
    assert f"--input {here}/data/part-0.jsonl,{here}/data/part-1.jsonl" in cmd
    assert "--fractions train=0.75,val=0.25" in cmd and "--key id,label" in cmd
    # fields the input has: a name it lacks is refused before launch (issue 22)
    app = api.stats(input="data/*.jsonl", output="s", fields=["x", "label"], quantiles=[0.5, 0.9])
    cmd = app.roles[0].args[-1]
    assert "--fields x,label" in cmd and "--quantiles 0.5,0.9" in cmd


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


def _write_config(root: Path, text: str) -> None:
    (root / ".torchxconfig").write_text(text)


def test_torchxconfig_component_defaults_apply_to_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 15: [component:...] sections give defaults for arguments the caller did not pass."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TORCHXCONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.torchxconfig of the machine
    make_dataset(tmp_path / "data", [2])
    _write_config(
        tmp_path,
        "[component:datapipes.transform]\nnum_workers = 3\noutput_format = parquet\nj = 2x3\n"
        "artifact_store = store_from_config\n\n"
        "[component:torchx_datapipes.components:transform]\nbatch_size = 7\n\n"
        "[component:datapipes.stats]\ntop_k = 5\nbins = 9\n\n"
        "[component:datapipes.split]\nfractions = a=0.5,b=0.5\nseed = 11\n",
    )
    app = api.transform(lambda r: r, input="data/*.jsonl", output="out")
    cmd, role = app.roles[0].args[-1], app.roles[0]
    assert "--num_workers 3" in cmd and "--output_format parquet" in cmd and "--batch_size 7" in cmd
    assert "--nproc_per_node 3" in cmd and role.num_replicas == 2
    assert list((tmp_path / "store_from_config").glob("*.pkl"))  # the live fn went to the configured store
    cmd = api.stats(input="data/*.jsonl", output="s").roles[0].args[-1]
    assert "--top_k 5" in cmd and "--bins 9" in cmd
    cmd = api.split(input="data/*.jsonl", output="p").roles[0].args[-1]
    assert "--fractions a=0.5,b=0.5" in cmd and "--seed 11" in cmd


def test_caller_arguments_win_over_torchxconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TORCHXCONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.torchxconfig of the machine
    make_dataset(tmp_path / "data", [2])
    _write_config(tmp_path, "[component:datapipes.transform]\nnum_workers = 3\nj = 2x3\n")
    cmd = (
        api.transform(lambda r: r, input="data/*.jsonl", output="out", j="1x1", num_workers=1)
        .roles[0]
        .args[-1]
    )
    assert "--num_workers 1" in cmd and "--nproc_per_node 1" in cmd
    cmd = api.stats(input="data/*.jsonl", output="s", top_k=4).roles[0].args[-1]
    assert "--top_k 4" in cmd


def test_bad_torchxconfig_values_are_refused_with_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchx_datapipes.appdef import InvalidArgumentError

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TORCHXCONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.torchxconfig of the machine
    make_dataset(tmp_path / "data", [2])
    _write_config(tmp_path, "[component:datapipes.stats]\ncolour = red\n")
    with pytest.raises(ValueError, match=r"\[component:datapipes.stats\]: unknown option\(s\) colour"):
        api.stats(input="data/*.jsonl", output="s")
    _write_config(tmp_path, "[component:datapipes.stats]\non_error = ignore\n")
    with pytest.raises(InvalidArgumentError, match="--on_error must be one of raise, skip; got 'ignore'"):
        api.stats(input="data/*.jsonl", output="s")
