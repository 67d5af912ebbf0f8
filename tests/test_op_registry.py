"""Issue 33: an op is one module. A toy op, declared here and registered from this test module, runs end
to end through the runner and shows up in the option checks and the runner's help; the built-in ops'
component functions match their specs (tests/test_options.py checks names, defaults and docstrings)."""

import json
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
from tdp_testutil import make_dataset, run_op

from torchx_datapipes import components
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import write_file
from torchx_datapipes.io.fs import join
from torchx_datapipes.ops import (
    OPS,
    SPECS,
    Keys,
    OpDef,
    get_op,
    manifest_keys,
    op_names,
    option_keys,
    record_keys,
    register_op,
)
from torchx_datapipes.ops.common import (
    INPUT_HELP,
    RUNNER_ONLY,
    data_options,
    io_options,
    launch_options,
    ship_options,
)
from torchx_datapipes.options import OpSpec, Option, OptionError
from torchx_datapipes.runner.main import parse_args

TOY_SPEC = OpSpec(
    "toy",
    (
        *io_options(INPUT_HELP, "output directory: toy.txt"),
        Option("word", "str", "hi", "the word toy.txt starts with"),
        *data_options(256, "records per batch", "raise or skip", output_format=False),
        *ship_options("artifact store", "how fn is shipped"),
        *launch_options("/toy"),
        *RUNNER_ONLY,
    ),
)


class ToyOp:
    """Counts the records of every unit; rank 0 writes ``WORD TOTAL`` to OUT/toy.txt."""

    name = "toy"

    def __init__(self, output: str, word: str) -> None:
        self.output, self.word = output, word

    def options(self) -> Dict[str, Any]:
        return {"toy": {"word": self.word}}

    def run(self, ctx: Any) -> None:
        ctx.run_pass("main", self.process)

    def process(self, unit: Any, reader: Any, sink: Any) -> Dict[str, Any]:
        n = 0
        for recs, _ in reader.batches():
            sink.drain_parse_errors()
            n += len(recs)
        sink.drain_parse_errors()
        return {ms.RECORDS_OUT: n, ms.FILTERED: 0, ms.FILES: []}

    def finalize(self, ctx: Any, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        total = sum(m[ms.RECORDS_OUT] for m in metas)
        write_file(join(self.output, "toy.txt"), f"{self.word} {total}".encode())
        return {"toy_records": total}


def make_toy(args: Any, cfg: Any, fn: Optional[Callable[..., Any]]) -> ToyOp:
    return ToyOp(cfg.output, args.word)


TOY = OpDef(
    TOY_SPEC,
    help="count records (a toy op registered by a test)",
    runner=f"{__name__}:make_toy",
    keys=Keys(
        manifest={"toy": (frozenset({"toy_records"}), frozenset())},
        options={"toy": frozenset({"toy"})},
        records={"toy": (frozenset({ms.RECORDS_OUT, ms.FILTERED}), frozenset())},
    ),
)


@pytest.fixture()
def toy() -> Iterator[OpDef]:
    register_op(TOY)
    yield TOY
    OPS.unregister("toy")


def test_a_registered_op_runs_end_to_end_through_the_runner(toy: OpDef, tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "data", [30, 12, 5])
    manifest = run_op("toy", str(tmp_path / "data/*.jsonl"), tmp_path / "out", "--word", "yo")
    assert (tmp_path / "out/toy.txt").read_text() == f"yo {len(recs)}"
    assert manifest["toy_records"] == len(recs) == manifest[ms.RECORDS_IN]
    written = json.loads((tmp_path / "out/_SUCCESS").read_text())
    assert written[ms.OP] == "toy"
    # the toy op's Keys, declared in this module, are what the registry answers and what was written
    always, optional = manifest_keys("toy")
    assert always <= set(written) <= always | optional
    assert set(written[ms.OPTIONS]) == option_keys("toy")
    for rec in (tmp_path / "out/_units").glob("*.json"):
        assert set(json.loads(rec.read_text())) == record_keys("toy")[0]


def test_a_registered_op_is_in_the_option_checks_and_the_help(
    toy: OpDef, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "toy" in op_names() and SPECS["toy"] is TOY_SPEC and get_op("toy") is TOY
    assert SPECS["toy"].check({"input": "a.jsonl", "output": "o"})["word"] == "hi"
    with pytest.raises(OptionError, match="toy: unknown option"):
        SPECS["toy"].check({"input": "a.jsonl", "output": "o", "wrod": "x"})
    with pytest.raises(OptionError, match="batch_size"):
        parse_args(["toy", "--input", "a", "--output", "o", "--batch_size", "0"])
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    assert "count records (a toy op registered by a test)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parse_args(["toy", "--help"])
    assert "the word toy.txt starts with" in capsys.readouterr().out


def test_api_app_builds_a_registered_op_s_job(toy: OpDef, tmp_path: Path, monkeypatch: Any) -> None:
    from torchx_datapipes import api
    from torchx_datapipes.appdef import InvalidArgumentError

    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [3])
    app = api.app("toy", "data/*.jsonl", "out", word="yo")
    cmd = " ".join(app.roles[0].args)
    assert "torchx_datapipes.runner toy" in cmd and "--word yo" in cmd, cmd
    with pytest.raises(InvalidArgumentError, match="toy: unknown option"):
        api.app("toy", "data/*.jsonl", "out", wrod="yo")


def test_the_clobber_rule_protects_the_built_in_ops() -> None:
    with pytest.raises(ValueError, match="op 'transform' is already registered"):
        register_op(OpDef(OpSpec("transform", ()), help="x", runner="x:y"))
    assert set(op_names()) >= {"transform", "split", "stats", "validate"}


@pytest.mark.parametrize("op", ["transform", "split", "stats", "validate"])
def test_each_built_in_op_has_its_component_and_runner(op: str) -> None:
    definition = get_op(op)
    assert definition.name == op and callable(getattr(components, op))
    from torchx_datapipes.plugins import load_ref

    assert callable(load_ref(definition.runner))
    assert definition.spec is SPECS[op]
