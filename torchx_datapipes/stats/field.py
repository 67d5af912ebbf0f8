"""Per-field accumulator: type counts plus one section per kind of value seen.

A column (one field's values in one batch) is split by Python type with one C-level
``Counter(map(type, ...))``; homogeneous columns, the common case, are used as they are.
Numbers become one float64 array per batch; lists contribute their lengths (as numbers) and
their flattened elements to a nested ``elements`` accumulator of the same kind. Typed values
(dates, timestamps, bytes, numpy arrays and torch tensors, ``Decimal``) get their own sections
(:mod:`torchx_datapipes.stats.typed`, :mod:`torchx_datapipes.stats.tensors`). A float NaN is
counted as missing, like ``None`` (the pandas convention), and also as ``numeric.nan``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import numbers
from collections import Counter
from itertools import chain
from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.flags import field_flags
from torchx_datapipes.stats.moments import FloatArray
from torchx_datapipes.stats.numeric import NumericAcc
from torchx_datapipes.stats.strings import StringAcc
from torchx_datapipes.stats.tensors import ShapeCounter, TensorAcc, shape_key
from torchx_datapipes.stats.typed import BytesAcc, TemporalAcc

TYPE_NAMES = (
    "int",
    "float",
    "decimal",
    "bool",
    "string",
    "bytes",
    "datetime",
    "date",
    "list",
    "tensor",
    "object",
    "null",
    "other",
)
NUMERIC_KINDS = ("int", "float", "decimal")
_KINDS: dict[type, str] = {
    int: "int",
    float: "float",
    bool: "bool",
    str: "string",
    list: "list",
    tuple: "list",
    dict: "object",
    type(None): "null",
    bytes: "bytes",
    bytearray: "bytes",
    memoryview: "bytes",
    dt.datetime: "datetime",
    dt.date: "date",
    decimal.Decimal: "decimal",
    np.ndarray: "tensor",
}


def kind_of_type(t: type) -> str:
    """The stats type name for a Python type (subclasses and numpy scalars included)."""
    kind = _KINDS.get(t)
    if kind is None:
        kind = _classify(t)
        _KINDS[t] = kind
    return kind


def _classify(t: type) -> str:
    for base, name in (
        (bool, "bool"),
        (str, "string"),
        (numbers.Integral, "int"),
        (numbers.Real, "float"),
        (decimal.Decimal, "decimal"),
        ((bytes, bytearray, memoryview), "bytes"),
        (dt.datetime, "datetime"),  # before date: a datetime is a date
        (dt.date, "date"),
        (np.datetime64, "datetime"),
        (np.ndarray, "tensor"),
        ((list, tuple), "list"),
        (dict, "object"),
    ):
        if issubclass(t, base):
            return name
    if t.__module__ == "numpy" and t.__name__ == "bool":  # np.bool_ is not a numbers.Integral
        return "bool"
    if any(c.__name__ == "Tensor" and c.__module__.split(".")[0] == "torch" for c in t.__mro__):
        return "tensor"  # torch.Tensor and subclasses (Parameter...), without importing torch
    return "other"


def to_float_array(values: list[Any]) -> FloatArray:
    """float64 array of ints/floats; ints beyond the float64 range become +/-inf."""
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:
        return np.array([_big_int_to_float(v) for v in values], dtype=np.float64)


def _big_int_to_float(v: Any) -> float:
    try:
        return float(v)
    except OverflowError:
        return float("inf") if v > 0 else float("-inf")


class FieldAcc:
    """Everything we know about one field (or about the elements of its lists)."""

    def __init__(self, config: StatsConfig) -> None:
        self.config = config
        self.types: Counter[str] = Counter()
        self.true = 0
        self.numeric: NumericAcc | None = None
        self.string: StringAcc | None = None
        self.list_length: NumericAcc | None = None
        self.list_shapes: ShapeCounter | None = None
        self.elements: FieldAcc | None = None
        self.n_elements = 0
        self.datetime: TemporalAcc | None = None
        self.date: TemporalAcc | None = None
        self.bytes: BytesAcc | None = None
        self.tensor: TensorAcc | None = None

    @property
    def nan(self) -> int:
        """Float NaN values (counted as missing, like null)."""
        return 0 if self.numeric is None else self.numeric.nan

    @property
    def count(self) -> int:
        """Values that are present, not null and not NaN."""
        return sum(self.types.values()) - self.types["null"] - self.nan

    def update(self, values: list[Any]) -> None:
        """Add one batch of this field's present values (``None`` for JSON null)."""
        if not values:
            return
        groups = self._split(values)
        nums = [v for k in NUMERIC_KINDS if k in groups for v in groups[k]]
        if nums:
            self._numeric().update(to_float_array(nums))
        if "bool" in groups:
            self.true += sum(1 for v in groups["bool"] if v)
        if "string" in groups:
            self._string().update(groups["string"])
        if "list" in groups:
            self._update_lists(groups["list"])
        self._update_typed(groups)

    def _update_typed(self, groups: dict[str, list[Any]]) -> None:
        if "datetime" in groups:
            if self.datetime is None:
                self.datetime = TemporalAcc(self.config)
            self.datetime.update(groups["datetime"])
        if "date" in groups:
            if self.date is None:
                self.date = TemporalAcc(self.config, date_only=True)
            self.date.update(groups["date"])
        if "bytes" in groups:
            if self.bytes is None:
                self.bytes = BytesAcc(self.config)
            self.bytes.update(groups["bytes"])
        if "tensor" in groups:
            if self.tensor is None:
                self.tensor = TensorAcc(self.config)
            self.tensor.update(groups["tensor"])

    def _split(self, values: list[Any]) -> dict[str, list[Any]]:
        types = set(map(type, values))  # a set is ~3x faster than a Counter here
        groups: dict[str, list[Any]] = {}
        for t in types:
            kind = kind_of_type(t)
            part = values if len(types) == 1 else [v for v in values if type(v) is t]
            self.types[kind] += len(part)
            if kind == "string" and t is not str:  # enums, numpy.str_: plain str for the sketches
                part = [str(v) for v in part]
            groups[kind] = groups[kind] + part if kind in groups else part
        return groups

    def _update_lists(self, lists: list[Any]) -> None:
        lengths = np.fromiter(map(len, lists), dtype=np.float64, count=len(lists))
        if self.list_length is None:
            self.list_length = NumericAcc(self.config)
        self.list_length.update(lengths)
        if self.list_shapes is None:
            self.list_shapes = ShapeCounter(self.config.exact_distinct_limit)
        self.list_shapes.add([shape_key(_list_shape(v)) for v in lists])
        if self.elements is None:
            self.elements = FieldAcc(self.config)
        elements = list(chain.from_iterable(lists))
        self.n_elements += len(elements)
        self.elements.update(elements)

    def _numeric(self) -> NumericAcc:
        if self.numeric is None:
            self.numeric = NumericAcc(self.config)
        return self.numeric

    def _string(self) -> StringAcc:
        if self.string is None:
            self.string = StringAcc(self.config)
        return self.string

    def merge(self, other: FieldAcc) -> None:
        self.types.update(other.types)
        self.true += other.true
        self.n_elements += other.n_elements
        self.numeric = _merge(self.numeric, other.numeric)
        self.string = _merge(self.string, other.string)
        self.list_length = _merge(self.list_length, other.list_length)
        self.elements = _merge(self.elements, other.elements)
        self.bytes = _merge(self.bytes, other.bytes)
        self.tensor = _merge(self.tensor, other.tensor)
        for name in ("datetime", "date"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                if mine is None:
                    mine = TemporalAcc(self.config, date_only=name == "date")
                    setattr(self, name, mine)
                mine.merge(theirs)
        if other.list_shapes is not None:
            if self.list_shapes is None:
                self.list_shapes = ShapeCounter(self.config.exact_distinct_limit)
            self.list_shapes.merge(other.list_shapes)

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        return {
            "types": dict(self.types),
            "true": self.true,
            "n_elements": self.n_elements,
            "numeric": None if self.numeric is None else self.numeric.state(blobs),
            "string": None if self.string is None else self.string.state(blobs),
            "list_length": None if self.list_length is None else self.list_length.state(blobs),
            "elements": None if self.elements is None else self.elements.state(blobs),
            "list_shapes": None if self.list_shapes is None else self.list_shapes.state(),
            "datetime": None if self.datetime is None else self.datetime.state(blobs),
            "date": None if self.date is None else self.date.state(blobs),
            "bytes": None if self.bytes is None else self.bytes.state(blobs),
            "tensor": None if self.tensor is None else self.tensor.state(blobs),
        }

    @staticmethod
    def from_state(d: dict[str, Any], blobs: sketches.Blobs, config: StatsConfig) -> FieldAcc:
        acc = FieldAcc(config)
        acc.types = Counter({str(k): int(v) for k, v in d["types"].items()})
        acc.true = int(d["true"])
        acc.n_elements = int(d["n_elements"])
        if d["numeric"] is not None:
            acc.numeric = NumericAcc.from_state(d["numeric"], blobs, config)
        if d["string"] is not None:
            acc.string = StringAcc.from_state(d["string"], blobs, config)
        if d["list_length"] is not None:
            acc.list_length = NumericAcc.from_state(d["list_length"], blobs, config)
        if d["elements"] is not None:
            acc.elements = FieldAcc.from_state(d["elements"], blobs, config)
        if d.get("list_shapes") is not None:
            acc.list_shapes = ShapeCounter.from_state(d["list_shapes"], config.exact_distinct_limit)
        for name in ("datetime", "date"):
            if d.get(name) is not None:
                setattr(acc, name, TemporalAcc.from_state(d[name], blobs, config, name == "date"))
        if d.get("bytes") is not None:
            acc.bytes = BytesAcc.from_state(d["bytes"], blobs, config)
        if d.get("tensor") is not None:
            acc.tensor = TensorAcc.from_state(d["tensor"], blobs, config)
        return acc

    def result(self, total: int) -> dict[str, Any]:
        """The stats.json entry; ``total`` is the population (records, or list elements)."""
        count = self.count
        out: dict[str, Any] = {
            "count": count,
            "missing": total - count,
            "null": self.types["null"],
            "nan": self.nan,
            "types": {t: self.types[t] for t in TYPE_NAMES if self.types[t]},
            "numeric": None if self.numeric is None else self.numeric.result(),
            "string": None if self.string is None else self.string.result(),
            "bool": None,
            "list": None,
            "datetime": None if self.datetime is None else self.datetime.result(),
            "date": None if self.date is None else self.date.result(),
            "bytes": None if self.bytes is None else self.bytes.result(),
            "tensor": None if self.tensor is None else self.tensor.result(),
        }
        if self.types["bool"]:
            out["bool"] = {"true": self.true, "false": self.types["bool"] - self.true}
        if self.list_length is not None and self.elements is not None:
            out["list"] = {
                "length": self.list_length.result(),
                **(self.list_shapes.result(self.config.top_k) if self.list_shapes else {}),
                "elements": self.elements.result(self.n_elements),
            }
        out["flags"] = field_flags(out)
        return out


def _list_shape(v: Any) -> tuple[int, ...]:
    """The shape of a (nested) list if it is rectangular, else just its length."""
    n = len(v)
    if not n or not isinstance(v[0], (list, tuple)):
        return (n,)
    inner = [_list_shape(x) if isinstance(x, (list, tuple)) else None for x in v]
    first = inner[0]
    if first is None or any(s != first for s in inner):
        return (n,)
    return (n, *first)


def _merge(a: Any, b: Any) -> Any:
    """Merge ``b`` into ``a``, creating ``a`` if needed; ``b`` is never aliased or modified."""
    if b is None:
        return a
    if a is None:
        a = type(b)(b.config)
    a.merge(b)
    return a
