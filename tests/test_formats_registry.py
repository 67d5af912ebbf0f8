"""Issue 10: input formats as plug-ins; unknown extensions refused before launch and when planning."""

import json
from pathlib import Path
from typing import Any, List

import pytest
from tdp_testutil import make_dataset

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.formats import extensions, registry
from torchx_datapipes.formats.base import Batches, InputFormat, compression_of
from torchx_datapipes.formats.format import Format
from torchx_datapipes.formats.planning import check_input_formats, plan_units
from torchx_datapipes.formats.reading import UnitReader


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [3])
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    return tmp_path


@pytest.mark.parametrize(
    "path, fmt",
    [
        ("a.jsonl", "jsonl"), ("a.ndjson.gz", "jsonl"), ("a.json", "json"), ("a.csv.zst", "csv"),
        ("a.TSV", "csv"), ("a.txt", "text"), ("a.parquet", "parquet"), ("x/a.png", "files"),
        ("a.JPEG", "files"), ("a.wav", "files"), ("a.npy", "files"), ("a.tar", "webdataset"),
        ("a.tar.gz", "webdataset"), ("a.tgz", "webdataset"), ("a.xml", None), ("README", None),
    ],
)  # fmt: skip
def test_detect_by_extension(path: str, fmt: Any) -> None:
    assert extensions.detect_format(path) == fmt


def test_compression_comes_from_fsspec() -> None:
    assert [compression_of(p) for p in ("a.gz", "a.zst", "a.bz2", "a.xz", "a.csv")] == [
        "gzip", "zstd", "bz2", "xz", None,
    ]  # fmt: skip


def test_unknown_extension_is_refused_by_the_component_before_launch(project: Path) -> None:
    (project / "data/notes.xml").write_text("<a/>")
    with pytest.raises(InvalidArgumentError) as info:
        components.transform(fn="t.py:f", input="data", output="out")
    msg = str(info.value)
    assert "notes.xml: unknown input extension" in msg and "--format" in msg
    assert "csv: .csv .tsv" in msg and "webdataset: .tar .tgz" in msg and "\n" not in msg
    assert not (project / "out").exists()
    app = components.transform(fn="t.py:f", input="data", output="out", format="jsonl")  # forced: fine
    assert "--format jsonl" in " ".join(app.roles[0].args)


def test_unknown_extension_is_refused_when_planning(tmp_path: Path) -> None:
    f = tmp_path / "a.xml"
    f.write_text("<a/>")
    with pytest.raises(ValueError, match=r"a\.xml: unknown input extension"):
        plan_units([(str(f), f.stat().st_size)])
    check_input_formats([str(tmp_path / "missing/*.jsonl")])  # missing inputs: another check's job


class Upper(InputFormat):
    name = "upper"
    extensions = (".up",)

    def read(self, reader: UnitReader) -> Batches:
        data = Path(reader.unit.path).read_text().split()
        yield [w.upper() for w in data], list(range(1, len(data) + 1))


def test_register_format_is_one_class(tmp_path: Path) -> None:
    registry.register_format("upper", Upper)
    try:
        f = tmp_path / "a.up"
        f.write_text("x y")
        (unit,) = plan_units([(str(f), f.stat().st_size)])
        assert unit.format == "upper"
        recs: List[Any] = [r for b, _ in UnitReader(unit).batches() for r in b]
        assert recs == ["X", "Y"]
        with pytest.raises(ValueError, match="already registered"):
            registry.register_format("upper", Upper)
    finally:
        registry.unregister("upper")


def test_missing_extra_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.register_format(Format("fancy", input="no_such_module_tdp:Fancy", extra="fancy"))
    try:
        with pytest.raises(ImportError, match=r"pip install 'torchx-datapipes\[fancy\]'"):
            registry.input_class("fancy")
    finally:
        registry.unregister("fancy")


def test_json_file_that_is_json_lines_stays_json_lines(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_text("\n".join(json.dumps({"i": i}) for i in range(5)))
    units = plan_units([(str(f), f.stat().st_size)], unit_mb=20 / 2**20)
    assert {u.format for u in units} == {"jsonl"} and len(units) > 1  # split into byte ranges
    assert [r["i"] for u in units for b, _ in UnitReader(u).batches() for r in b] == list(range(5))


def test_the_runner_refuses_an_unknown_extension_too(tmp_path: Path) -> None:
    from tdp_testutil import run_op

    d = tmp_path / "d"
    make_dataset(d, [2])
    (d / "x.xml").write_text("<a/>")
    with pytest.raises(ValueError, match=r"x\.xml: unknown input extension"):
        run_op("transform", str(d), tmp_path / "o", fn=_identity)
    run_op("transform", str(d / "part-0.jsonl"), tmp_path / "o2", "--format", "jsonl", fn=_identity)


def _identity(r: Any) -> Any:
    return r


@pytest.mark.parametrize("other", ["README.txt", "meta.xml"])
def test_a_media_directory_with_other_files_is_refused_listing_extensions_and_fixes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str
) -> None:
    from tdp_testutil import run_op

    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(3):
        (d / f"im{i}.png").write_bytes(b"\x89PNG fake %d" % i)
    (d / "im3.jpg").write_bytes(b"\xff\xd8 fake")
    (d / other).write_text("about these images\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError) as info:  # on the client, before launch
        components.transform(fn="t.py:f", input="imgs", output="out")
    msg = str(info.value)
    assert ".png x3" in msg and ".jpg x1" in msg and other.split(".")[1] in msg
    assert "--format files" in msg and "imgs/*.png'" in msg and "jsonl" not in msg
    with pytest.raises(ValueError, match="mixes media files"):  # and in the runner
        run_op("transform", str(d), tmp_path / "o", fn=_identity)
    m = run_op("transform", str(d), tmp_path / "o2", "--format", "files", fn=_name)
    assert m["records_out"] == 5
    m = run_op("transform", str(d / "*.png"), tmp_path / "o3", fn=_name)
    assert m["records_out"] == 3


def _name(r: Any) -> Any:
    return {"path": r["path"].rsplit("/", 1)[-1], "size": r["size"]}
