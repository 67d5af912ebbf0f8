"""Check every record of a batch against a :class:`Schema`, column by column.

The common case costs a few C-level passes per column (``set(map(type, ...))``, one float64
array for numeric rules, one ``set`` for a string domain); only a column that breaks a rule is
walked in Python, to find the offending records' file, line and value (up to 5 per anomaly).
"""

from __future__ import annotations

from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, Sequence

import numpy as np

from torchx_datapipes.schema.anomalies import Found, show
from torchx_datapipes.schema.model import FieldSchema, Schema
from torchx_datapipes.stats.field import kind_of_type, to_float_array
from torchx_datapipes.stats.tensors import to_numpy

Locate = Callable[[int], tuple[str, int]]  # record index in the batch -> (file, line)


class _Absent:
    """Marks a field a record does not have (distinct from a JSON null)."""


ABSENT = _Absent()
_NUMERIC = {"int", "float", "decimal"}


def allowed_kinds(fs: FieldSchema) -> set[str]:
    kinds = set(fs.type)
    if "float" in kinds:
        kinds.add("int")  # a float field accepts integers (JSON writes 1.0 as 1)
    return kinds


class RecordChecker:
    """Checks batches of records; what it finds accumulates in :attr:`found`."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.found = Found()
        self.names = list(schema.fields)
        self.known = set(self.names)
        self.kinds = {n: allowed_kinds(f) for n, f in schema.fields.items()}
        self.domains = {n: set(f.domain) for n, f in schema.fields.items() if f.domain is not None}

    def check_records(self, recs: list[Any], locate: Locate, only: list[str] | None = None) -> None:
        """One batch of parsed records (dicts; anything else is a type mismatch of ``$value``).

        ``only``: check just these fields (schema fields and new ones), e.g. :func:`fast.suspects`.
        """
        dicts = recs if set(map(type, recs)) <= {dict} else [r if isinstance(r, dict) else {} for r in recs]
        if only is None:
            keys: set[Any] = set().union(*dicts) if dicts else set()
            new, names = [str(k) for k in keys - self.known], self.names
        else:
            new, names = [k for k in only if k not in self.known], [n for n in self.names if n in only]
        for key in new:
            self._new_field(key, dicts, locate)
        for name, values in zip(names, _aligned(dicts, names), strict=True):
            self.check_column(name, values, locate)

    def _new_field(self, name: str, dicts: list[dict[Any, Any]], locate: Locate) -> None:
        idx = [i for i, r in enumerate(dicts) if name in r]
        self.found.add(name, "new_field", len(idx), _examples(idx, [dicts[i][name] for i in idx], locate))

    def check_column(self, name: str, values: list[Any], locate: Locate) -> None:
        """One field's values, one per record (``ABSENT`` where a record lacks the field)."""
        fs = self.schema.fields[name]
        types = set(map(type, values))
        clean = _Absent not in types and type(None) not in types  # values line up with records, all present
        if not clean:
            if fs.required:
                self._where(name, "missing_field", values, lambda v: v is ABSENT or v is None, locate)
            types.discard(_Absent)
            types.discard(type(None))
        if not types:
            return
        kinds = {kind_of_type(t) for t in types}
        allowed = self.kinds[name]
        if fs.type and not kinds <= allowed:
            bad = {t for t in types if kind_of_type(t) not in allowed}
            self._where(name, "type_mismatch", values, lambda v: type(v) in bad, locate)
        if kinds & _NUMERIC and (
            not fs.allow_nan or not fs.allow_inf or fs.min is not None or fs.max is not None
        ):
            self._numeric(name, fs, values, types, clean, locate)
        if name in self.domains and "string" in kinds:
            self._domain(name, values, types, clean, locate)
        if fs.shape is not None or fs.dtype is not None:
            self._shapes(name, fs, values, kinds, locate)

    def _numeric(
        self, name: str, fs: FieldSchema, values: list[Any], types: set[type], clean: bool, locate: Locate
    ) -> None:
        pure = clean and all(kind_of_type(t) in ("int", "float") for t in types)
        idx = list(range(len(values))) if pure else [i for i, v in enumerate(values) if _is_num(v)]
        nums = values if pure else [values[i] for i in idx]
        if not nums:
            return
        arr = to_float_array(nums) if all(kind_of_type(t) != "decimal" for t in types) else _floats(nums)
        finite = np.isfinite(arr)
        out = np.zeros(arr.shape, dtype=bool)
        if not finite.all():
            nan = np.isnan(arr)
            if not fs.allow_nan and nan.any():
                self._mask(name, "nan_present", nan, idx, nums, locate)
            if not fs.allow_inf:
                out |= ~finite & ~nan
        with np.errstate(invalid="ignore"):
            if fs.min is not None:
                out |= finite & (arr < fs.min)
            if fs.max is not None:
                out |= finite & (arr > fs.max)
        if out.any():
            self._mask(name, "out_of_range", out, idx, nums, locate)

    def _domain(self, name: str, values: list[Any], types: set[type], clean: bool, locate: Locate) -> None:
        domain = self.domains[name]
        if all(t.__hash__ is not None for t in types):  # one C-level set; nulls and numbers drop out below
            unseen = {v for v in set(values) - domain if isinstance(v, str)}
        else:
            unseen = {v for v in values if isinstance(v, str)} - domain
        if unseen:
            strings = [v for v in values if isinstance(v, str)]
            self._where(
                name, "unexpected_values", values, lambda v: isinstance(v, str) and v in unseen, locate
            )
            item = self.found.get(name, "unexpected_values")
            assert item is not None
            Found._add_values(item["values"], [v for v in strings if v in unseen])

    def _shapes(self, name: str, fs: FieldSchema, values: list[Any], kinds: set[str], locate: Locate) -> None:
        def bad(v: Any) -> bool:
            kind = kind_of_type(type(v))
            if kind == "tensor":
                arr, dtype, _ = to_numpy(v)
                return (fs.dtype is not None and dtype not in fs.dtype) or (
                    fs.shape is not None and list(arr.shape) != fs.shape
                )
            if kind == "list" and fs.shape is not None:
                return _list_shape(v) != fs.shape
            return False

        if kinds & {"tensor", "list"}:
            self._where(name, "shape_mismatch", values, bad, locate)

    # -- locating offending records (only for columns that break a rule) ---------------------
    def _where(
        self, name: str, kind: str, values: list[Any], pred: Callable[[Any], bool], locate: Locate
    ) -> None:
        idx = [i for i, v in enumerate(values) if pred(v)]
        self.found.add(name, kind, len(idx), _examples(idx, [values[i] for i in idx], locate))

    def _mask(
        self, name: str, kind: str, mask: Any, idx: Sequence[int], nums: list[Any], locate: Locate
    ) -> None:
        hits = np.flatnonzero(mask)
        first = hits[:5].tolist()
        examples = _examples([idx[j] for j in first], [nums[j] for j in first], locate)
        self.found.add(name, kind, int(hits.size), examples)


def _examples(idx: Sequence[int], values: Sequence[Any], locate: Locate) -> list[dict[str, Any]]:
    out = []
    for i, v in zip(idx[:5], values[:5], strict=False):
        file, line = locate(i)
        out.append({"file": file, "line": line, "value": None if v is ABSENT else show(v)})
    return out


def _aligned(dicts: list[dict[Any, Any]], names: list[str]) -> list[list[Any]]:
    """Each name's values, one per record, ``ABSENT`` where a record lacks it."""
    if not names:
        return []
    if not dicts:
        return [[] for _ in names]
    try:
        if len(names) == 1:
            return [list(map(itemgetter(names[0]), dicts))]
        return [list(c) for c in zip(*map(itemgetter(*names), dicts), strict=True)]
    except KeyError:  # some record lacks some field: that field by dict.get, the others as above
        out = []
        for n in names:
            try:
                out.append(list(map(itemgetter(n), dicts)))
            except KeyError:
                out.append(list(map(dict.get, dicts, repeat(n), repeat(ABSENT))))
        return out


def _is_num(v: Any) -> bool:
    return kind_of_type(type(v)) in _NUMERIC


def _floats(values: list[Any]) -> Any:
    return np.array([float(v) for v in values], dtype=np.float64)


def _list_shape(v: Any) -> list[int]:
    from torchx_datapipes.stats.field import _list_shape as shape

    return list(shape(v))


__all__ = ["ABSENT", "RecordChecker", "allowed_kinds"]
