"""Which fields of a batch need a record-level check, read from the profile the batch just updated.

The validate op profiles each batch anyway (``StatsPartial.update``); comparing each field's
counters before and after the batch (types, nulls, NaN, ±inf) and the running min/max, string
values and shapes against the schema tells, at O(fields) per batch, that a column cannot break
any rule. Only the other columns are walked record by record (:class:`RecordChecker`) to find
the offending records, so clean data costs almost nothing beyond the profile.
"""

from __future__ import annotations

from torchx_datapipes.schema.model import FieldSchema, Schema
from torchx_datapipes.stats.field import FieldAcc
from torchx_datapipes.stats.partial import VALUE_FIELD, StatsPartial
from torchx_datapipes.stats.tensors import shape_key

Snapshot = dict[str, tuple[dict[str, int], int, int, int]]


def _state(acc: FieldAcc) -> tuple[dict[str, int], int, int, int]:
    num = acc.numeric
    return (dict(acc.types), acc.nan, num.pos_inf if num else 0, num.neg_inf if num else 0)


def snapshot(partial: StatsPartial) -> Snapshot:
    """Every field's counters, before a batch."""
    return {name: _state(acc) for name, acc in partial.fields.items()}


def suspects(
    schema: Schema, kinds: dict[str, set[str]], partial: StatsPartial, before: Snapshot, n: int
) -> list[str]:
    """The fields whose values in the last batch (of ``n`` records) may break a rule; ``[]``: none."""
    out = []
    for name, acc in partial.fields.items():
        if name == VALUE_FIELD:
            continue
        types0, nan0, pinf0, ninf0 = before.get(name, ({}, 0, 0, 0))
        delta = {k: v - types0.get(k, 0) for k, v in acc.types.items() if v != types0.get(k, 0)}
        fs = schema.fields.get(name)
        if fs is None:
            if delta:
                out.append(name)  # a new field with values in this batch
            continue
        present = sum(delta.values()) - delta.get("null", 0)
        num = acc.numeric
        nan = acc.nan - nan0
        inf = (num.pos_inf + num.neg_inf - pinf0 - ninf0) if num else 0
        if (
            (fs.required and present < n)
            or (fs.type and set(delta) - {"null"} - kinds[name])
            or (nan and not fs.allow_nan)
            or (inf and not fs.allow_inf)
            or _out_of_range(fs, acc)
            or (fs.domain is not None and "string" in delta and _outside_domain(fs, acc))
            or (_shaped(fs) and bool({"list", "tensor"} & set(delta)) and _bad_shapes(fs, acc))
        ):
            out.append(name)
    for name, fs in schema.fields.items():  # a required field no record of the batch has at all
        if fs.required and n and name not in partial.fields:
            out.append(name)
    return out


def _shaped(fs: FieldSchema) -> bool:
    return fs.shape is not None or fs.dtype is not None


def _out_of_range(fs: FieldSchema, acc: FieldAcc) -> bool:
    m = acc.numeric.moments if acc.numeric is not None else None
    if m is None or m.count == 0:
        return False
    assert m.min is not None and m.max is not None
    return (fs.min is not None and m.min < fs.min) or (fs.max is not None and m.max > fs.max)


def _outside_domain(fs: FieldSchema, acc: FieldAcc) -> bool:
    s = acc.string
    if s is None:
        return False
    if s.exact is None:
        return True  # more distinct strings than a domain (<= 100) can hold
    return not set(s.exact).issubset(fs.domain or ())


def _bad_shapes(fs: FieldSchema, acc: FieldAcc) -> bool:
    want = None if fs.shape is None else shape_key(tuple(fs.shape))
    if acc.tensor is not None:
        t = acc.tensor
        if fs.dtype is not None and not set(t.dtypes).issubset(fs.dtype):
            return True
        if want is not None and (t.shapes.overflow or set(t.shapes.counts) - {want}):
            return True
    if acc.list_shapes is not None and want is not None:
        if acc.list_shapes.overflow or set(acc.list_shapes.counts) - {want}:
            return True
    return False
