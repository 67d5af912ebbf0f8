"""OutputDataset's manifest checks and argument validation: errors name the value and the fix."""

import json
from pathlib import Path
from typing import Any

import pytest
from data_testutil import split_output, transform_output

from torchx_datapipes.data import OutputDataset, OutputMapDataset
from torchx_datapipes.io import partfiles as _files


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return transform_output(tmp_path_factory.mktemp("m"), [30, 0, 21], "jsonl")


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> str:
    return split_output(tmp_path_factory.mktemp("s"), [40, 31])


def test_no_success_is_refused_naming_the_url(tmp_path: Path) -> None:
    (tmp_path / "part-00000.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(FileNotFoundError, match=r"_SUCCESS does not exist.*has not committed.*rerun"):
        OutputDataset(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        OutputDataset.map_style(str(tmp_path))


def test_stats_output_is_refused(tmp_path: Path, out: str) -> None:
    m = json.loads((Path(out) / "_SUCCESS").read_text())
    (tmp_path / "_SUCCESS").write_text(json.dumps({**m, "op": "stats"}))  # what a stats job commits
    with pytest.raises(ValueError, match="is a stats output"):
        OutputDataset(str(tmp_path))


def test_split_selection_errors_name_the_splits(out: str, split: str) -> None:
    with pytest.raises(
        ValueError, match=r"split output: choose one with split=\.\.\., one of \['train', 'val'\]"
    ):
        OutputDataset(split)
    with pytest.raises(ValueError, match=r"split 'test' does not exist.*\['train', 'val'\]"):
        OutputDataset(split, "test")
    with pytest.raises(ValueError, match="transform output without splits: pass split=None"):
        OutputDataset(out, "train")
    m = json.loads((Path(split) / "_SUCCESS").read_text())
    train, val = OutputDataset(split, "train"), OutputDataset(split, "val")
    assert (train.num_records, val.num_records) == (m["splits"]["train"], m["splits"]["val"])
    assert sorted(r["id"] for r in [*train, *val]) == list(range(71))


def test_length_comes_from_the_manifest_without_reading_parts(out: str, monkeypatch: Any) -> None:
    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("a part was opened")

    monkeypatch.setattr(_files, "open_part", refuse)
    ds = OutputDataset(out, world_size=2, rank=1)
    assert ds.num_records == 51 and len(ds) == 25
    assert len(OutputMapDataset(out)) == 51


def test_size_mismatch_is_refused_naming_the_file(tmp_path: Path) -> None:
    out = Path(transform_output(tmp_path, [5, 6], "jsonl"))
    part = out / "part-00001.jsonl"
    part.write_bytes(part.read_bytes() + b'{"id": 99}\n')
    with pytest.raises(ValueError, match=r"part-00001\.jsonl is \d+ bytes but the manifest .* recorded \d+"):
        list(OutputDataset(str(out)))
    with pytest.raises(ValueError, match=r"part-00001\.jsonl is \d+ bytes"):
        OutputDataset.map_style(str(out))[7]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"even": "all"}, r"even='all': expected one of \('none', 'pad', 'drop'\)"),
        ({"seed": -1}, r"seed=-1: expected an int >= 0"),
        ({"shuffle_window": 0}, r"shuffle_window=0: expected an int >= 1"),
        ({"read_ahead": -2}, r"read_ahead=-2"),
        ({"shuffle": "yes"}, r"shuffle='yes': expected True or False"),
        ({"rank": 2, "world_size": 2}, r"rank=2 with world_size=2: expected 0 <= rank < world_size"),
        ({"rank": 0}, r"give both or neither"),
        ({"rank": 0, "world_size": 0}, r"world_size=0"),
        ({"columns": "id"}, r"columns='id': expected a list of field names"),
        ({"storage_options": "anon"}, r"storage_options='anon': expected a dict of fsspec options"),
        ({"cache_dir": ""}, r"cache_dir='': expected a local directory path"),
        ({"split": 3}, r"split=3: expected a split name"),
    ],
)
def test_bad_arguments(out: str, kwargs: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OutputDataset(out, **kwargs)


def test_unknown_parquet_column_names_the_columns(tmp_path: Path) -> None:
    out = transform_output(tmp_path, [4], "parquet")
    with pytest.raises(
        ValueError, match=r"columns \['nope'\] are not in .*its columns: \['id', 'text', 'x', 'label'\]"
    ):
        OutputDataset(out, columns=["id", "nope"])
    assert list(OutputDataset(out, columns=["label"]))[1] == {"label": 1}


def test_bad_epoch_and_repr(out: str) -> None:
    ds = OutputDataset(out)
    with pytest.raises(ValueError, match="epoch=-1"):
        ds.set_epoch(-1)
    assert "51 records" in repr(ds) and "51 records" in repr(ds.map_style(out))


def drop_all(r: Any) -> None:
    return None


def test_empty_output_has_no_records(tmp_path: Path) -> None:
    from data_testutil import make_input
    from tdp_testutil import run_op

    run_op("transform", make_input(tmp_path, [5]), tmp_path / "o", "--output_format", "parquet", fn=drop_all)
    for even in ("none", "pad", "drop"):
        ds = OutputDataset(str(tmp_path / "o"), shuffle=True, even=even, rank=1, world_size=2)
        assert (ds.num_records, len(ds), list(ds)) == (0, 0, [])
    assert len(OutputMapDataset(str(tmp_path / "o"))) == 0


def test_rank_and_world_size_default_to_the_process_group(
    out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed as dist

    assert (OutputDataset(out).rank, OutputDataset(out).world_size) == (0, 1)  # no process group
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        ds = OutputDataset(out)
        assert (ds.rank, ds.world_size) == (0, 1)
        monkeypatch.setattr(dist, "get_rank", lambda: 2)  # as rank 2 of a 4-rank group would see
        monkeypatch.setattr(dist, "get_world_size", lambda: 4)
        ds = OutputDataset(out)
        assert (ds.rank, ds.world_size, len(ds)) == (2, 4, 13)
        assert OutputDataset(out, rank=1, world_size=3).world_size == 3  # explicit values win
    finally:
        dist.destroy_process_group()


def test_parquet_without_pyarrow_gives_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    out = transform_output(tmp_path, [3], "parquet")
    jsonl = transform_output(tmp_path / "j", [3], "jsonl")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if the [parquet] extra were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install 'torchx-datapipes\[parquet\]'"):
        OutputDataset(out)
    assert len(list(OutputDataset(jsonl))) == 3  # JSON Lines and tar need no pyarrow
