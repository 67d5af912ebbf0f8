"""Components: the TorchX linter accepts them, and their docstrings (the CLI help) match."""

import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable, List

import pytest
from tdp_testutil import make_dataset
from torchx.components.component_test_base import ComponentTestCase

from torchx_datapipes import _torchx_file, components
from torchx_datapipes.appdef import InvalidArgumentError

REPO = Path(__file__).resolve().parents[1]


def _recipes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("clean_text_recipe", REPO / "components/clean_text.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CASES = [
    (components, "transform"),
    (components, "split"),
    (components, "stats"),
    (components, "validate"),
    (_recipes(), "clean_text"),
]


class _Validator(ComponentTestCase):
    def runTest(self) -> None:  # pragma: no cover - unittest plumbing
        pass


@pytest.mark.parametrize("module,name", CASES, ids=[n for _, n in CASES])
def test_torchx_linter_accepts_component(module: ModuleType, name: str) -> None:
    case = _Validator()
    case.setUp()
    try:
        case.validate(module, name)
    finally:
        case.tearDown()


def _doc_args(fn: Callable[..., object]) -> List[str]:
    doc = inspect.getdoc(fn) or ""
    section = doc.split("Args:", 1)[1]
    return re.findall(r"^    (\w+):", section, flags=re.M)


@pytest.mark.parametrize("module,name", CASES, ids=[n for _, n in CASES])
def test_docstring_args_equal_parameters(module: ModuleType, name: str) -> None:
    fn = getattr(module, name)
    assert _doc_args(fn) == list(inspect.signature(fn).parameters)


def test_client_side_validation_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [3])
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    with pytest.raises(InvalidArgumentError, match="matched no files"):
        components.transform(fn="t.py:f", input="nope/*.jsonl", output="out")
    with pytest.raises(InvalidArgumentError, match="has no attribute 'g'"):
        components.transform(fn="t.py:g", input="data/*.jsonl", output="out")
    (tmp_path / "out").mkdir()
    (tmp_path / "out/_SUCCESS").write_text("{}")
    with pytest.raises(InvalidArgumentError, match="--overwrite True"):
        components.transform(fn="t.py:f", input="data/*.jsonl", output="out")
    with pytest.raises(InvalidArgumentError, match="sum to 1.1"):
        components.split(input="data/*.jsonl", output="o2", fractions="a=0.8,b=0.3")
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", overwrite=True, j="2x3")
    cmd = app.roles[0].args[-1]
    assert "-m torchx_datapipes.runner transform" in cmd and "--overwrite True" in cmd
    assert "--nproc_per_node 3" in cmd and app.roles[0].num_replicas == 2
    assert (tmp_path / ".tdp/artifacts").is_dir()


def test_torchx_file_hook_returns_module_source() -> None:
    src = _torchx_file.get_file_contents("torchx_datapipes.components")
    assert src is not None and "def transform(" in src
    assert _torchx_file.get_file_contents("no_such_module_xyz") is None
    assert "torchx_datapipes" in sys.modules
