"""Per-field accumulator: type counts plus one section per kind of value seen.

A column (one field's values in one batch) is split by Python type with one C-level
``Counter(map(type, ...))``; homogeneous columns, the common case, are used as they are.
Numbers become one float64 array per batch; lists contribute their lengths (as numbers) and
their flattened elements to a nested ``elements`` accumulator of the same kind.
"""

from __future__ import annotations

import numbers
from collections import Counter
from itertools import chain
from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.moments import FloatArray
from torchx_datapipes.stats.numeric import NumericAcc
from torchx_datapipes.stats.strings import StringAcc

TYPE_NAMES = ("int", "float", "bool", "string", "list", "object", "null", "other")
_KINDS: dict[type, str] = {
    int: "int",
    float: "float",
    bool: "bool",
    str: "string",
    list: "list",
    tuple: "list",
    dict: "object",
    type(None): "null",
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
        ((list, tuple), "list"),
        (dict, "object"),
    ):
        if issubclass(t, base):
            return name
    if t.__module__ == "numpy" and t.__name__ == "bool":  # np.bool_ is not a numbers.Integral
        return "bool"
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
        self.elements: FieldAcc | None = None
        self.n_elements = 0

    @property
    def count(self) -> int:
        """Values that are present and not null."""
        return sum(self.types.values()) - self.types["null"]

    def update(self, values: list[Any]) -> None:
        """Add one batch of this field's present values (``None`` for JSON null)."""
        if not values:
            return
        groups = self._split(values)
        nums = [groups[k] for k in ("int", "float") if k in groups]
        if nums:
            self._numeric().update(to_float_array(nums[0] if len(nums) == 1 else nums[0] + nums[1]))
        if "bool" in groups:
            self.true += sum(1 for v in groups["bool"] if v)
        if "string" in groups:
            self._string().update(groups["string"])
        if "list" in groups:
            self._update_lists(groups["list"])

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

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        return {
            "types": dict(self.types),
            "true": self.true,
            "n_elements": self.n_elements,
            "numeric": None if self.numeric is None else self.numeric.state(blobs),
            "string": None if self.string is None else self.string.state(blobs),
            "list_length": None if self.list_length is None else self.list_length.state(blobs),
            "elements": None if self.elements is None else self.elements.state(blobs),
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
        return acc

    def result(self, total: int) -> dict[str, Any]:
        """The stats.json entry; ``total`` is the population (records, or list elements)."""
        count = self.count
        out: dict[str, Any] = {
            "count": count,
            "missing": total - count,
            "null": self.types["null"],
            "types": {t: self.types[t] for t in TYPE_NAMES if self.types[t]},
            "numeric": None if self.numeric is None else self.numeric.result(),
            "string": None if self.string is None else self.string.result(),
            "bool": None,
            "list": None,
        }
        if self.types["bool"]:
            out["bool"] = {"true": self.true, "false": self.types["bool"] - self.true}
        if self.list_length is not None and self.elements is not None:
            out["list"] = {
                "length": self.list_length.result(),
                "elements": self.elements.result(self.n_elements),
            }
        return out


def _merge(a: Any, b: Any) -> Any:
    """Merge ``b`` into ``a``, creating ``a`` if needed; ``b`` is never aliased or modified."""
    if b is None:
        return a
    if a is None:
        a = type(b)(b.config)
    a.merge(b)
    return a
