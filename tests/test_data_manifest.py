"""OutputDataset's manifest checks and argument validation: errors name the value and the fix."""

import json
from pathlib import Path
from typing import Any

import pytest
from data_testutil import split_output, transform_output

from torchx_datapipes.data import OutputDataset, OutputMapDataset, _files


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
