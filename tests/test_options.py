"""Item 14: one option spec per op; every option is checked on the client before anything launches."""

import inspect
import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from tdp_testutil import make_dataset, run_op, run_torchx

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.ops import SPECS
from torchx_datapipes.options import REQUIRED, OpSpec, OptionError, parse_bool
from torchx_datapipes.runner.main import parse_args

_ANNOTATION = {"str": str, "int": int, "float": float, "bool": str, "dict": Dict[str, str], "list": List[str]}


def _doc_args(fn: Callable[..., object]) -> Dict[str, str]:
    """``name -> description`` of the docstring's Args section, whitespace normalised."""
    section = (inspect.getdoc(fn) or "").split("Args:", 1)[1]
    items = re.split(r"^    (\w+): ", section, flags=re.M)[1:]
    return {name: " ".join(text.split()) for name, text in zip(items[::2], items[1::2])}


@pytest.mark.parametrize("op", sorted(SPECS))
def test_component_signature_and_docstring_follow_the_spec(op: str) -> None:
    spec, fn = SPECS[op], getattr(components, op)
    params = inspect.signature(fn).parameters
    assert list(params) == [o.name for o in spec.component_options()]
    docs = _doc_args(fn)
    assert list(docs) == list(params)
    for o in spec.component_options():
        p = params[o.name]
        want = Optional[_ANNOTATION[o.type]] if o.optional else _ANNOTATION[o.type]
        assert p.annotation == want, o.name
        if o.default is REQUIRED:
            assert p.default is inspect.Parameter.empty, o.name
        else:
            assert p.default == (str(o.default) if o.type == "bool" else o.default_value()), o.name
        assert docs[o.name] == " ".join(o.help.split()), o.name


@pytest.mark.parametrize("op", sorted(SPECS))
def test_runner_parser_is_built_from_the_spec(op: str, tmp_path: Path) -> None:
    required = ["--input", "i", "--output", "o", *(["--artifact", "a.pkl"] if op == "transform" else [])]
    if op == "validate":  # the schema file is checked when the arguments are
        (tmp_path / "s.json").write_text('{"fields": {}}')
        required += ["--schema", str(tmp_path / "s.json")]
    ns = parse_args([op, *required])
    for o in SPECS[op].options:
        assert hasattr(ns, o.name) == o.runner, o.name
        if o.runner and o.default is not REQUIRED and o.name != "artifact":
            assert getattr(ns, o.name) == o.default, o.name


def test_default_max_error_rate_is_a_tenth() -> None:
    assert {SPECS[op]["max_error_rate"].default for op in SPECS} == {0.1}
    assert inspect.signature(components.transform).parameters["max_error_rate"].default == 0.1


@pytest.mark.parametrize(
    "value, expected",
    [("True", True), ("false", False), ("YES", True), ("no", False), ("1", True), ("0", False), (True, True)],
)
def test_bool_accepts_true_false_1_0_yes_no(value: Any, expected: bool) -> None:
    assert parse_bool(value) is expected


@pytest.mark.parametrize("value", ["maybe", "", "2", "on", None])
def test_bool_refuses_anything_else(value: Any) -> None:
    with pytest.raises(ValueError, match="true, false, 1, 0, yes, no"):
        parse_bool(value)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [3])
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    return tmp_path


BAD = [
    ("transform", "on_error", "ignore", ["raise, skip", "'ignore'"]),
    ("transform", "output_format", "csv", ["jsonl, megatron, parquet, webdataset", "'csv'"]),
    ("transform", "format", "xml", ["auto, csv, files, json, jsonl, ", "parquet, text, webdataset", "'xml'"]),
    ("transform", "overwrite", "maybe", ["true, false, 1, 0, yes, no", "'maybe'"]),
    ("transform", "num_workers", 0, [">= 1", "got 0"]),
    ("transform", "batch_size", -5, [">= 1", "got -5"]),
    ("transform", "max_error_rate", 1.5, ["[0, 1]", "got 1.5"]),
    ("transform", "max_error_rate", -0.1, ["[0, 1]", "got -0.1"]),
    ("transform", "unit_mb", 0.0, ["> 0", "got 0.0"]),
    ("transform", "j", "2y3", ["1:2x4", "'2y3'"]),
    ("transform", "j", "0x2", ["at least 1 node", "'0x2'"]),
    ("transform", "backend", "dill", ["cloudpickle, torch.package, module", "'dill'"]),
    ("transform", "num_workers", "two", ["expected an integer", "'two'"]),
    ("transform", "output", " ", ["must not be empty", "' '"]),
    ("stats", "input", "", ["must not be empty", "''"]),
    ("transform", "fn", "", ["must not be empty", "''"]),
    ("split", "fractions", "a=0.8,b=0.3", ["sum to 1.1", "'a=0.8,b=0.3'"]),
    ("split", "method", "random", ["hash, exact", "'random'"]),
    ("split", "key", "a,,b", ["invalid key", "'a,,b'"]),
    ("stats", "quantiles", "0.5,2", ["outside [0, 1]", "'0.5,2'"]),
    ("stats", "top_k", 0, ["[1, 100000]", "got 0"]),
    ("stats", "bins", 0, ["[1, 10000]", "got 0"]),
]


@pytest.mark.parametrize("op, name, value, needles", BAD, ids=[f"{b[0]}-{b[1]}={b[2]}" for b in BAD])
def test_bad_value_is_refused_on_the_client_in_one_line(
    project: Path, op: str, name: str, value: Any, needles: List[str]
) -> None:
    kw: Dict[str, Any] = {"input": "data/*.jsonl", "output": "out", name: value}
    if op == "transform":
        kw.setdefault("fn", "t.py:f")
    with pytest.raises(InvalidArgumentError) as info:
        getattr(components, op)(**kw)
    msg = str(info.value)
    assert "\n" not in msg and f"--{name}" in msg and msg.startswith(op), msg
    for needle in needles:
        assert needle in msg, msg
    assert not (project / ".tdp/artifacts").exists()  # checked before the function is packaged


def test_overwrite_strings_reach_the_runner_as_bools(project: Path) -> None:
    (project / "out").mkdir()
    (project / "out/_SUCCESS").write_text("{}")
    for text in ("yes", "True", "1", "TRUE"):
        cmd = (
            components.transform(fn="t.py:f", input="data/*.jsonl", output="out", overwrite=text)
            .roles[0]
            .args[-1]
        )
        assert "--overwrite True" in cmd
    with pytest.raises(InvalidArgumentError, match="--overwrite True"):  # no: the output is complete
        components.transform(fn="t.py:f", input="data/*.jsonl", output="out", overwrite="no")


def test_runner_checks_the_same_spec(project: Path) -> None:
    with pytest.raises(OptionError, match=r"transform --num_workers must be >= 1; got '0'"):
        run_op("transform", "data/*.jsonl", project / "o", "--num_workers", "0", fn=lambda r: r)
    with pytest.raises(OptionError, match="--on_error must be one of raise, skip; got 'ignore'"):
        run_op("stats", "data/*.jsonl", project / "o", "--on_error", "ignore")
    m = run_op("stats", "data/*.jsonl", project / "s", "--overwrite", "yes")
    assert m["records_in"] == 3


def test_unknown_component_argument_is_refused() -> None:
    spec: OpSpec = SPECS["stats"]
    with pytest.raises(OptionError, match="unknown option\\(s\\) colour"):
        spec.check({"input": "i", "output": "o", "colour": "red"})


CLI_BAD = [
    (["--on_error", "ignore"], "--on_error must be one of raise, skip; got 'ignore'"),
    (
        ["--output_format", "csv"],
        "--output_format must be a known output format (an input format with no writer: 'csv'",
    ),
    (
        ["--overwrite", "maybe"],
        "--overwrite: expected one of true, false, 1, 0, yes, no (any case); got 'maybe'",
    ),
]


@pytest.mark.parametrize("extra, message", CLI_BAD, ids=[c[0][0] for c in CLI_BAD])
def test_torchx_run_refuses_before_launch(project: Path, extra: List[str], message: str) -> None:
    logs = project / "logs"
    t0 = time.monotonic()
    res = run_torchx(
        ["run", "-s", "local_cwd", "-cfg", f"log_dir={logs}", "torchx_datapipes.components:transform",
         "--fn", "t.py:f", "--input", "data/*.jsonl", "--output", "out", *extra],
        cwd=project, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    out = res.stdout + res.stderr
    assert res.returncode != 0 and message in out, out
    assert not logs.exists() and "torchrun" not in out and not (project / "out").exists(), out
    assert elapsed < 30, elapsed  # no 5-second launch: just the torchx CLI's own start-up


def test_torchx_run_overwrite_yes_means_true(project: Path) -> None:
    (project / "out").mkdir()
    (project / "out/_SUCCESS").write_text("{}")
    res = run_torchx(
        ["run", "--dryrun", "-s", "local_cwd", "torchx_datapipes.components:transform",
         "--fn", "t.py:f", "--input", "data/*.jsonl", "--output", "out", "--overwrite", "yes"],
        cwd=project, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--overwrite True" in res.stdout + res.stderr
