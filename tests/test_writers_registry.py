"""The output-writer registry: built-in formats, a format registered from code, a clear refusal."""

from pathlib import Path
from typing import Any, List

import pytest

from torchx_datapipes.formats import registry
from torchx_datapipes.formats.registry import builtin_output_names, register_writer, writer_class
from torchx_datapipes.formats.writer import BasePart, Failures
from torchx_datapipes.formats.writing import PartWriter, part_name

OUTPUT_FORMATS = builtin_output_names()


class CsvIds(BasePart):
    """A toy writer: one ``id`` per line; records without one are failures."""

    ext = "ids"

    def _write(self, recs: List[Any]) -> Failures:
        bad: Failures = []
        for i, r in enumerate(recs):
            if "id" not in r:
                bad.append((i, "record has no id"))
            else:
                self.fh.write(f"{r['id']}\n".encode())
        return bad


def test_builtin_formats_and_names() -> None:
    assert OUTPUT_FORMATS == ("jsonl", "megatron", "parquet", "webdataset")
    assert part_name(3, "webdataset", prefix="train") == "train/part-00003.tar"
    assert part_name(3, "parquet") == "part-00003.parquet" and part_name(3, "jsonl") == "part-00003.jsonl"
    with pytest.raises(
        ValueError, match="unknown output format 'csvv'; use one of jsonl, megatron, parquet, webdataset, ndj"
    ):
        writer_class("csvv")
    with pytest.raises(ValueError, match="an input format with no writer: 'csv'; use one of jsonl, megatron"):
        writer_class("csv")


def test_a_registered_writer_is_one_class_and_one_line(tmp_path: Path) -> None:
    register_writer("ids", CsvIds)
    try:
        url = str(tmp_path / part_name(0, "ids"))
        w = PartWriter(url, "ids")
        assert w.write([{"id": 1}, {"x": 2}, {"id": 3}]) == [(1, "record has no id")]
        w.commit()
        assert (tmp_path / "part-00000.ids").read_text() == "1\n3\n" and w.records == 2
        assert w.file_sum("part-00000.ids").size == 4
    finally:
        registry.unregister("ids")


def test_an_aborted_part_leaves_nothing(tmp_path: Path) -> None:
    for fmt in OUTPUT_FORMATS:
        w = PartWriter(str(tmp_path / part_name(0, fmt)), fmt)
        w.write([{"id": 1}])
        w.abort()
    assert list(tmp_path.iterdir()) == []
