"""A format registered from code (``register_format``/``register_writer`` in the user's script)
reaches the job's processes: the client ships it in the job's environment (``TDP_FORMATS``), as
``"module:Class"`` import strings. A class the job cannot import by name (defined in ``__main__``
or in a function) is refused on the client, naming the fix, instead of failing after the launch.
"""

import sys
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest
from tdp_testutil import write_jsonl

from torchx_datapipes import api
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.data import OutputDataset
from torchx_datapipes.formats import extensions, registry
from torchx_datapipes.formats.format import Format
from torchx_datapipes.formats.lines import JsonLinesFormat

MODULE = textwrap.dedent(
    """
    from torchx_datapipes.formats.jsonl.writer import JsonlPart
    from torchx_datapipes.formats.lines import JsonLinesFormat

    class UpjInput(JsonLinesFormat):
        name = "upj"
        extensions = (".upj",)

    class UpjPart(JsonlPart):
        ext = "upj"
    """
)


def bump(rec: Dict[str, Any]) -> Dict[str, Any]:
    return {**rec, "n": rec["i"] + 1}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "codefmt.py").write_text(MODULE)
    for i in range(3):
        write_jsonl(tmp_path / "data" / f"p{i}.upj", [{"i": i * 10 + k} for k in range(10)])
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(registry.SHIPPED_ENV, raising=False)
    yield tmp_path
    for name in ("upj", "upj_local"):
        registry.unregister(name)
    sys.modules.pop("codefmt", None)


@pytest.mark.e2e
def test_a_format_registered_in_the_script_runs_in_the_job(project: Path) -> None:
    import codefmt

    reader = "torchx_datapipes.formats.jsonl.reader:JsonlFormat"
    registry.register_format(Format("upj", input=codefmt.UpjInput, writer=codefmt.UpjPart, reader=reader))
    app = api.transform(bump, input="data", output="out", output_format="upj", j="1x2")  # --format auto
    (role,) = app.roles
    assert registry.SHIPPED_ENV in role.env
    result = api.run(app)
    assert result.state == "SUCCEEDED"
    parts = sorted(p.name for p in (project / "out").glob("part-*"))
    assert parts and all(p.endswith(".upj") for p in parts)
    got = sorted(r["n"] for r in OutputDataset(str(project / "out")))
    assert got == [i + 1 for i in range(30)]


def test_the_shipped_table_registers_in_another_process_and_its_own_registration_wins(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import codefmt

    registry.register_format(Format("upj", input=codefmt.UpjInput, aliases=("up",)))
    text = registry.shipped(["up", "jsonl"])  # an alias names it; built-ins are not shipped
    registry.unregister("upj")
    assert "upj" not in registry.input_names()
    monkeypatch.setenv(registry.SHIPPED_ENV, text)  # what the job's processes find
    assert "upj" in registry.input_names() and registry.input_class("up") is codefmt.UpjInput
    assert extensions.detect_format("x/y.upj") == "upj"
    assert registry.shipped(["jsonl"]) == ""


def test_a_class_the_job_cannot_import_is_refused_on_the_client(project: Path) -> None:
    class Local(JsonLinesFormat):
        name = "upj_local"
        extensions = (".upjl",)

    registry.register_format(Format("upj_local", input=Local))
    with pytest.raises(InvalidArgumentError) as e:
        api.transform(bump, input="data", output="out", format="upj_local")
    msg = str(e.value)
    assert "format 'upj_local' was registered from code" in msg and "cannot import it" in msg
    assert "entry point" in msg and not (project / "out").exists()
    # with --format auto a format only detected by extension is not shipped (nothing to refuse)
    assert registry.shipped(["auto"]) == ""
