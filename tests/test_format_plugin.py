"""A format known by entry points alone (tests/plugins/tdp_testfmt, installed by ``make test``) works
for ``--format``, ``--output_format`` and ``OutputDataset``, with no file of torchx_datapipes naming it.
"""

import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Dict

import pytest
from tdp_testutil import run_op

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.data import OutputDataset
from torchx_datapipes.formats import registry

PLUGIN = Path(__file__).parent / "plugins" / "tdp_testfmt"


def test_the_plugin_is_installed_by_entry_points_and_named_nowhere_in_the_package() -> None:
    assert {ep.name for ep in entry_points(group="torchx_datapipes.formats")} >= {"ndj"}
    pkg = Path(components.__file__).parent
    assert not [p for p in pkg.rglob("*.py") if "ndj" in p.read_text().replace("ndjson", "")]
    assert "ndj" in registry.input_names() and "ndj" in registry.output_names()


def _tag(rec: Dict[str, Any]) -> Dict[str, Any]:
    return {**rec, "seen": True}


def test_input_output_and_reader_through_the_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.ndj").write_text("".join(json.dumps({"i": i, "big": 2**70 + i}) + "\n" for i in range(5)))
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    monkeypatch.chdir(tmp_path)
    # the client accepts the plug-in's names (nothing hard-coded) and refuses a typo naming the registry
    app = components.transform(fn="t.py:f", input="data", output="out", output_format="ndj")
    assert "--output_format ndj" in " ".join(app.roles[0].args)
    with pytest.raises(InvalidArgumentError, match=r"ndjj.*ndj"):
        components.transform(fn="t.py:f", input="data", output="out", output_format="ndjj")
    # --format auto picks the plug-in by its extension; --output_format writes its parts
    m = run_op("transform", str(data), tmp_path / "o", "--output_format", "ndj", fn=_tag)
    assert m["records_out"] == 5 and sorted(p.name for p in (tmp_path / "o").glob("part-*")) == [
        "part-00000.ndj"
    ]
    got = sorted(OutputDataset(str(tmp_path / "o")), key=lambda r: r["i"])
    assert got == [{"i": i, "big": 2**70 + i, "seen": True} for i in range(5)]
    # and the next job reads the output back through the plug-in's input format
    m2 = run_op("transform", str(tmp_path / "o"), tmp_path / "o2", "--format", "ndj", fn=_tag)
    assert m2["records_out"] == 5


def test_a_writer_without_a_reader_is_refused_by_output_dataset_naming_the_fix(tmp_path: Path) -> None:
    from torchx_datapipes.formats.jsonl.writer import JsonlPart

    class NoReader(JsonlPart):
        ext = "nr"
        reader = None

    registry.register_writer("nr", NoReader)
    try:
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "a.jsonl").write_bytes(b'{"i": 1}\n')
        run_op("transform", str(tmp_path / "in"), tmp_path / "o", "--output_format", "nr", fn=_tag)
        with pytest.raises(ValueError, match=r"'nr'.*declares no reader.*reader='module:Class'"):
            OutputDataset(str(tmp_path / "o"))
    finally:
        registry.unregister("nr")
