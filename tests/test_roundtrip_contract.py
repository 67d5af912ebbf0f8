"""The round trip is the contract: a value a transform writes is read back equal and of the same type,
by ``OutputDataset`` and by the next job's ``--input``, or the writer refuses it naming the field.

One parametrized suite over the output formats (in the style of fsspec's abstract tests). Each
format's table says, per value, whether it is kept (``KEPT``) or refused as a bad record; a kept
value must come back identical through both readers. Jobs run in-process (the runner's ``main``):
the launch is not what is tested here.
"""

import datetime
import decimal
import math
import zoneinfo
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import numpy as np
import orjson
import pytest
import torch
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.data import OutputDataset
from torchx_datapipes.formats.registry import get_format, output_names

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
VALUES["t_torch_bfloat16"] = torch.tensor([[1.5, -2.25]], dtype=torch.bfloat16)
VALUES["t_empty"] = np.zeros((0, 3), dtype="float32")
PARIS = zoneinfo.ZoneInfo("Europe/Paris")
VALUES.update(
    {
        "decimal": decimal.Decimal("-1234.5670"),  # the trailing zero is part of the value's exponent
        "decimal_38plus": decimal.Decimal("1234567890123456789012345678901234567890.5"),
        "decimal_nan": decimal.Decimal("NaN"),
        "date": datetime.date(2024, 2, 29),
        "datetime": datetime.datetime(2024, 2, 29, 13, 14, 15, 123456),
        "datetime_utc": datetime.datetime(2024, 2, 29, 13, 14, 15, 123456, tzinfo=datetime.timezone.utc),
        "datetime_offset": datetime.datetime(
            2024, 2, 29, 13, 14, 15, tzinfo=datetime.timezone(datetime.timedelta(hours=5, minutes=30))
        ),
        "datetime_zone": datetime.datetime(2024, 7, 1, 2, 3, 4, tzinfo=PARIS),
        "datetime_zone_fold": datetime.datetime(
            2024, 10, 27, 2, 30, fold=1, tzinfo=PARIS
        ),  # the repeated hour
        "time": datetime.time(13, 14, 15, 123456),
        "time_tz": datetime.time(13, 14, 15, tzinfo=datetime.timezone.utc),
        "nested_typed": {"when": datetime.date(2024, 1, 2), "price": [decimal.Decimal("0.10")]},
    }
)

ALL = set(VALUES)

# per format: the values it refuses (each a bad record naming the field); the rest are kept
REFUSED: Dict[str, set] = {
    # JSON has no bytes, NaN or infinity (typed values are tagged objects: formats/jsonl/codec.py)
    "jsonl": {"bytes", "nan", "inf", "ninf", "t_float32_nan"},
    # Parquet integers are 64-bit at most; numpy has no bfloat16; Arrow decimals have no NaN; an
    # Arrow time has no time zone; a dict of dates/decimals is a struct, kept
    "parquet": {
        "int_big", "int_big_neg", "mixed_list", "empty_dict", "t_torch_bfloat16", "decimal_nan", "time_tz",
    },
    # .npy has no bfloat16
    "webdataset": {"t_torch_bfloat16"},
    # the test plug-in (tests/plugins/tdp_testfmt, installed by make test): JSON Lines by entry points
    "ndj": {"bytes", "nan", "inf", "ninf", "t_float32_nan"},
}  # fmt: skip
# a format whose None reads back as a missing field (none of ours: WebDataset writes a .json null)
MISSING_AS_NONE: Dict[str, Set[str]] = {}


def _describe(v: Any) -> Any:
    """A value's type and exact content, comparable across readers (tensors: dtype, shape, values)."""
    if isinstance(v, np.ndarray):
        v = torch.from_numpy(v)
    if isinstance(v, torch.Tensor):
        vals = v.double().tolist() if v.dtype != torch.bool else v.tolist()
        return ("tensor", str(v.dtype), tuple(v.shape), _describe(vals))
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else repr(v))
    if isinstance(v, decimal.Decimal):
        return ("Decimal", str(v))  # digits and exponent: Decimal("1.10") == Decimal("1.1") is not enough
    if isinstance(v, (datetime.datetime, datetime.time)):  # wall time, offset, zone and fold
        tz = None if v.tzinfo is None else str(v.tzinfo)
        return (type(v).__name__, v.isoformat(), tz, v.fold)
    if isinstance(v, datetime.date):
        return ("date", v.isoformat())
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


def _bad_records(out: Path) -> Dict[str, str]:
    """``value name -> error`` of the records the writer refused (``OUT/_errors``)."""
    names = sorted(ALL)
    errors = [
        orjson.loads(line)
        for p in sorted((out / "_errors").glob("*"))
        for line in p.read_bytes().splitlines()
    ]
    return {names[e["line"] - 1]: e["error"] for e in errors}


def _refused(fmt: str, out: Path) -> set:
    """What ``fmt`` refuses: its row of REFUSED, or, for a format installed without one (a plug-in
    running the suite against itself), whatever it refused: each refusal must still name its field
    and every other value must read back exactly."""
    return REFUSED[fmt] if fmt in REFUSED else set(_bad_records(out))


# every output format the registry knows that has inputs too, the plug-ins installed in this venv
# included; an output-only format (megatron: token ids, read by TokenDataset) has its own tests
ROUND_TRIP = tuple(n for n in output_names() if not get_format(n).output_only)


@pytest.fixture(scope="module", params=ROUND_TRIP)
def written(request: Any, tmp_path_factory: Any) -> Tuple[str, Path, Dict[str, Any]]:
    fmt = request.param
    root = tmp_path_factory.mktemp(f"contract-{fmt}")
    out, manifest = _write(root, fmt, sorted(ALL))
    return fmt, out, manifest


def test_the_suite_runs_every_registered_output_format() -> None:
    assert set(ROUND_TRIP) >= {"jsonl", "parquet", "webdataset", "ndj"} and "megatron" not in ROUND_TRIP


def _expected(fmt: str, name: str) -> Dict[str, Any]:
    if name in MISSING_AS_NONE.get(fmt, set()):
        return {"i": ("int", sorted(ALL).index(name))}
    return {"i": ("int", sorted(ALL).index(name)), name: _describe(VALUES[name])}


def test_refused_values_are_bad_records_naming_the_field(written: Tuple[str, Path, Dict[str, Any]]) -> None:
    fmt, out, manifest = written
    bad = _bad_records(out)
    assert set(bad) == _refused(fmt, out), (fmt, sorted(bad))
    for name, error in bad.items():
        assert f"field {name}" in error, (fmt, name, error)
    assert manifest["records_out"] == len(ALL) - len(bad)


def test_output_dataset_reads_back_same_value_and_type(written: Tuple[str, Path, Dict[str, Any]]) -> None:
    fmt, out, _ = written
    names = sorted(ALL)
    refused = _refused(fmt, out)
    got = {}
    for rec in OutputDataset(str(out)):
        name = names[rec["i"]]
        got[name] = {k: _describe(v) for k, v in rec.items() if k != "__key__" and v is not None or k == name}
    for name in sorted(ALL - refused):
        want = _expected(fmt, name)
        have = {k: v for k, v in got[name].items() if k in want or v != ("NoneType", None)}
        assert have == want, (fmt, name)


def test_next_jobs_input_reads_back_same_value_and_type(
    written: Tuple[str, Path, Dict[str, Any]], tmp_path: Path
) -> None:
    fmt, out, _ = written
    names = sorted(ALL)
    refused = _refused(fmt, out)
    again = tmp_path / "again"
    run_op("transform", str(out), again, fn=_Describe())
    seen = {}
    for line in (again / "part-00000.jsonl").read_bytes().splitlines():  # the next job reads OUT/*
        rec = orjson.loads(line)
        seen[names[rec["i"]]] = rec["d"]
    assert set(seen) == ALL - refused
    for name in sorted(ALL - refused):
        want = _expected(fmt, name)
        described = eval(seen[name], {"nan": math.nan})  # noqa: S307 - our own repr of tuples
        have = {k: v for k, v in described.items() if k in want or v != ("NoneType", None)}
        assert have == want, (fmt, name, have, want)


# ---- the JSON tags and Parquet's one-kind-per-column rule, beyond one value per record ----------


class _Keep:
    def __call__(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        return {"i": rec["i"], "d": repr({k: _describe(v) for k, v in rec.items()})}


def test_a_jsonl_input_decodes_only_exact_tags_and_refuses_broken_ones(tmp_path: Path) -> None:
    lines = [
        {"i": 0, "v": {"__tdp__": "decimal", "value": "1.10"}},  # a tag: decoded
        {"i": 1, "v": {"__tdp__": "decimal", "value": "1.10", "note": "x"}},  # another key: a dict
        {"i": 2, "v": {"__tdp__": "a user's own", "value": "x"}},  # no such tag: a dict
        {"i": 3, "v": {"__tdp__": "date", "value": "2024-02-30"}},  # no such day: a bad record
        {"i": 4, "v": [{"__tdp__": "tensor", "dtype": "uint8", "shape": [2, 2], "data": [1, 2, 3]}]},  # short
        {"i": 5, "v": {"x": {"__tdp__": "tensor", "dtype": "uint8", "shape": [2], "data": [1, 2]}}},
        {"i": 6, "v": "__tdp__", "w": '{"__tdp__": "decimal", "value": "1"}'},  # strings: never decoded
    ]
    write_jsonl(tmp_path / "in" / "a.jsonl", lines)
    m = run_op(
        "transform", str(tmp_path / "in"), tmp_path / "o", "--on_error", "skip", "--max_error_rate", "1",
        fn=_Keep(),
    )  # fmt: skip
    got = {
        r["i"]: eval(r["d"])
        for r in map(orjson.loads, (tmp_path / "o/part-00000.jsonl").read_bytes().splitlines())
    }  # noqa: S307
    assert got[0]["v"] == ("Decimal", "1.10")
    assert got[1]["v"] == _describe(lines[1]["v"]) and got[2]["v"] == _describe(lines[2]["v"])
    assert got[5]["v"] == (
        "dict",
        (("x", ("tensor", "torch.uint8", (2,), ("list", (("float", "1.0"), ("float", "2.0"))))),),
    )
    assert got[6] == {k: _describe(v) for k, v in lines[6].items()}
    errors = sorted(
        (e["line"], e["error"])
        for e in map(orjson.loads, (tmp_path / "o/_errors/part-00000.jsonl").read_bytes().splitlines())
    )
    assert [line for line, _ in errors] == [4, 5] and m["bad"] == 2
    assert (
        "tagged date that does not decode" in errors[0][1]
        and "tagged tensor that does not decode" in errors[1][1]
    )


def test_parquet_refuses_a_column_mixing_kinds_of_dates_or_time_zones(tmp_path: Path) -> None:
    utc = datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc)
    mixes = {
        1: {"v": datetime.datetime(2024, 1, 1, 12, tzinfo=PARIS)},  # another zone than record 0's
        2: {"v": datetime.datetime(2024, 1, 1, 12)},  # naive next to aware: Arrow would make it UTC
        3: {"v": datetime.date(2024, 1, 1)},  # a date next to datetimes
        4: {
            "v": utc,
            "w": [datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1, 12)],
        },  # a date would truncate
    }
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"i": i} for i in range(6)])
    m = run_op(
        "transform", str(tmp_path / "in"), tmp_path / "o", "--output_format", "parquet", "--on_error", "skip",
        "--max_error_rate", "1", fn=_Mix(utc, mixes),
    )  # fmt: skip
    errors = {
        e["line"] - 1: e["error"]
        for p in (tmp_path / "o/_errors").glob("*")
        for e in map(orjson.loads, p.read_bytes().splitlines())
    }
    assert sorted(errors) == [1, 2, 3, 4], errors
    assert all("field v" in errors[i] for i in (1, 2, 3)) and "field w" in errors[4], errors
    back = {r["i"]: r for r in OutputDataset(str(tmp_path / "o"))}
    assert sorted(back) == [0, 5] and m["records_out"] == 2
    assert all(_describe(back[i]["v"]) == _describe(utc) for i in (0, 5))


class _Mix:
    def __init__(self, first: Any, mixes: Dict[int, Dict[str, Any]]) -> None:
        self.first, self.mixes = first, mixes

    def __call__(self, rec: Dict[str, Any]) -> Dict[str, Any]:
        return {"i": rec["i"], **self.mixes.get(rec["i"], {"v": self.first})}
