"""The round trip is the contract: a value a transform writes is read back equal and of the same type,
by ``OutputDataset`` and by the next job's ``--input``, or the writer refuses it naming the field.

One parametrized suite over the output formats (in the style of fsspec's abstract tests). Each
format's table says, per value, whether it is kept (``KEPT``) or refused as a bad record; a kept
value must come back identical through both readers. Jobs run in-process (the runner's ``main``):
the launch is not what is tested here.
"""

import math
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import orjson
import pytest
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.data import OutputDataset

BIG = 123456789012345678901234567890

# name -> value; each is written as the only field (besides "i") of its own record
VALUES: Dict[str, Any] = {
    "int": 7,
    "int_min64": -(2**63),
    "int_max64": 2**63 - 1,
    "int_big": BIG,
    "int_big_neg": -BIG,
    "id": "007",  # a string that looks like a number, in a field WebDataset reads as a class index
    "txt": 5,  # an int in a field WebDataset reads as text
    "str": 'héllo, "world"\n',
    "float": 1.5,
    "nan": float("nan"),
    "inf": float("inf"),
    "ninf": float("-inf"),
    "bool": True,
    "none": None,
    "bytes": b"\x00\xffraw",
    "nested": {"a": [{"b": "x", "c": [1.5, None]}], "d": {"e": [[1, 2], []]}},
    "mixed_list": [1, "a", {"b": 2}],
    "empty_dict": {},
    "list_int": [1, 2, 3],
}
for dt in ["uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool"]:
    for nd, shape in enumerate([(), (3,), (2, 3), (2, 1, 2), (1, 2, 1, 2)]):
        VALUES[f"t_{dt}_{nd}d"] = (
            (np.arange(int(np.prod(shape))) % 2 == 1 if dt == "bool" else np.arange(int(np.prod(shape))))
            .astype(dt)
            .reshape(shape)
        )
VALUES["t_float32_nan"] = torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.float32)
VALUES["t_torch_int16"] = torch.arange(6, dtype=torch.int16).reshape(2, 3)

ALL = set(VALUES)
TENSORS = {k for k in VALUES if k.startswith("t_")}

# per format: the values it refuses (each a bad record naming the field); the rest are kept
REFUSED: Dict[str, set] = {
    # JSON has no bytes, NaN or infinity
    "jsonl": {"bytes", "nan", "inf", "ninf", "t_float32_nan"},
    # Parquet integers are 64-bit at most
    "parquet": {"int_big", "int_big_neg", "mixed_list", "empty_dict"},
    "webdataset": set(),
    # the test plug-in (tests/plugins/tdp_testfmt, installed by make test): JSON Lines by entry points
    "ndj": {"bytes", "nan", "inf", "ninf", "t_float32_nan"},
}
# a None in WebDataset is not a member: it reads back as a missing field (formats/webdataset/codec.py)
MISSING_AS_NONE = {"webdataset": {"none"}}
# documented encodings NOT yet reversed on read (the contract's open item): JSON Lines writes
# arrays and tensors as nested lists (write Parquet or WebDataset to keep dtype and shape)
AS_LISTS = {"jsonl": TENSORS - REFUSED["jsonl"], "ndj": TENSORS - REFUSED["ndj"]}


def _describe(v: Any) -> Any:
    """A value's type and exact content, comparable across readers (tensors: dtype, shape, values)."""
    if isinstance(v, np.ndarray):
        v = torch.from_numpy(v)
    if isinstance(v, torch.Tensor):
        vals = v.double().tolist() if v.dtype != torch.bool else v.tolist()
        return ("tensor", str(v.dtype), tuple(v.shape), _describe(vals))
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else repr(v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _describe(x)) for k, x in v.items())))
    if isinstance(v, (list, tuple)):
        return ("list", tuple(_describe(x) for x in v))
    return (type(v).__name__, v)


def _write(root: Path, fmt: str, names: List[str]) -> Tuple[Path, Dict[str, Any]]:
    """A transform whose record ``i`` becomes ``{"i": i, names[i]: VALUES[names[i]]}``."""
    write_jsonl(root / "in" / "a.jsonl", [{"i": i} for i in range(len(names))])
    out = root / f"out-{fmt}"
    manifest = run_op(
        "transform",
        str(root / "in"),
        out,
        "--output_format",
        fmt,
        "--on_error",
        "skip",
        "--max_error_rate",
        "1",
        fn=_Make(names),
    )
    return out, manifest


class _Make:
    def __init__(self, names: List[str]) -> None:
        self.names = names

    def __call__(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        name = self.names[rec["i"]]
        return {"i": rec["i"], name: VALUES[name]}


class _Describe:
    """The next job's function: what it was handed, described (so the output is plain JSON)."""

    def __call__(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        return {"i": int(rec["i"]), "d": repr({k: _describe(v) for k, v in rec.items() if k != "__key__"})}


@pytest.fixture(scope="module", params=["jsonl", "parquet", "webdataset", "ndj"])
def written(request: Any, tmp_path_factory: Any) -> Tuple[str, Path, Dict[str, Any]]:
    fmt = request.param
    root = tmp_path_factory.mktemp(f"contract-{fmt}")
    out, manifest = _write(root, fmt, sorted(ALL))
    return fmt, out, manifest


def _expected(fmt: str, name: str) -> Dict[str, Any]:
    if name in MISSING_AS_NONE.get(fmt, set()):
        return {"i": ("int", sorted(ALL).index(name))}
    value = VALUES[name]
    if name in AS_LISTS.get(fmt, set()):
        value = np.asarray(value).tolist()
    return {"i": ("int", sorted(ALL).index(name)), name: _describe(value)}


def test_refused_values_are_bad_records_naming_the_field(written: Tuple[str, Path, Dict[str, Any]]) -> None:
    fmt, out, manifest = written
    names = sorted(ALL)
    errors = [
        orjson.loads(line)
        for p in sorted((out / "_errors").glob("*"))
        for line in p.read_bytes().splitlines()
    ]
    bad = {names[e["line"] - 1]: e["error"] for e in errors}
    assert set(bad) == REFUSED[fmt], (fmt, sorted(bad))
    for name, error in bad.items():
        assert f"field {name}" in error, (fmt, name, error)
    assert manifest["records_out"] == len(ALL) - len(REFUSED[fmt])


def test_output_dataset_reads_back_same_value_and_type(written: Tuple[str, Path, Dict[str, Any]]) -> None:
    fmt, out, _ = written
    names = sorted(ALL)
    got = {}
    for rec in OutputDataset(str(out)):
        name = names[rec["i"]]
        got[name] = {k: _describe(v) for k, v in rec.items() if k != "__key__" and v is not None or k == name}
    for name in sorted(ALL - REFUSED[fmt]):
        want = _expected(fmt, name)
        have = {k: v for k, v in got[name].items() if k in want or v != ("NoneType", None)}
        assert have == want, (fmt, name)


def test_next_jobs_input_reads_back_same_value_and_type(
    written: Tuple[str, Path, Dict[str, Any]], tmp_path: Path
) -> None:
    fmt, out, _ = written
    names = sorted(ALL)
    again = tmp_path / "again"
    run_op("transform", str(out), again, fn=_Describe())
    seen = {}
    for line in (again / "part-00000.jsonl").read_bytes().splitlines():  # the next job reads OUT/*
        rec = orjson.loads(line)
        seen[names[rec["i"]]] = rec["d"]
    assert set(seen) == ALL - REFUSED[fmt]
    for name in sorted(ALL - REFUSED[fmt]):
        want = _expected(fmt, name)
        described = eval(seen[name], {"nan": math.nan})  # noqa: S307 - our own repr of tuples
        have = {k: v for k, v in described.items() if k in want or v != ("NoneType", None)}
        assert have == want, (fmt, name, have, want)
