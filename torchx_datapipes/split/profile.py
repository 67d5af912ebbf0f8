"""Split hygiene: a light per-split profile, and each split's drift from the whole data set.

Per split and unit we keep, for each top-level field, either a KLL sketch and moments of its
numbers (plus exact counts while they are at most :data:`DISCRETE_LIMIT` distinct integers, e.g.
class labels) or exact counts of its strings/booleans while there are at most
:data:`CATEGORY_LIMIT` distinct values; other fields are dropped. The profiles travel in the unit
commit records and are merged at commit; each split is then compared with the union of all
splits by :mod:`torchx_datapipes.schema.drift` (KS / chi-square for small splits, distances
for large ones), e.g. to catch a ``--key`` that puts most of one class into one split.
"""

from __future__ import annotations

import base64
from collections import Counter
from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.field import to_float_array
from torchx_datapipes.stats.moments import Moments
from torchx_datapipes.stats.partial import _columns

CATEGORY_LIMIT = 100
DISCRETE_LIMIT = 30
_KLL_K = 200


class FieldProfile:
    def __init__(self) -> None:
        self.kind = ""  # "num" | "cat"
        self.count = 0
        self.kll: Any = None
        self.moments = Moments()
        self.values: Counter[str] | None = Counter()


class SplitProfile:
    """Numbers and categories of the records of one split (mergeable, JSON state)."""

    def __init__(self) -> None:
        self.records = 0
        self.fields: dict[str, FieldProfile] = {}
        self.dropped: set[str] = set()

    def update(self, recs: list[Any]) -> None:
        dicts = [r for r in recs if isinstance(r, dict)]
        self.records += len(recs)
        if not dicts:
            return
        for key, values in _columns(dicts, None):
            name = str(key)
            if name in self.dropped:
                continue
            types = set(map(type, values)) - {type(None)}
            kind = (
                "num"
                if types and types <= {int, float}
                else ("cat" if types and types <= {str, bool} else "")
            )
            fp = self.fields.setdefault(name, FieldProfile())
            if not kind or (fp.kind and fp.kind != kind):
                self._drop(name)
                continue
            fp.kind = kind
            has_null = any(v is None for v in values)
            self._add(name, fp, [v for v in values if v is not None] if has_null else values)

    def _add(self, name: str, fp: FieldProfile, values: list[Any]) -> None:
        fp.count += len(values)
        if fp.kind == "cat":
            assert fp.values is not None
            fp.values.update(str(v).lower() if isinstance(v, bool) else v for v in values)
            if len(fp.values) > CATEGORY_LIMIT:
                self._drop(name)
            return
        arr = to_float_array(values)
        arr = arr[np.isfinite(arr)]
        if fp.kll is None:
            fp.kll = sketches.new_kll(_KLL_K)
        if arr.size:
            fp.kll.update(arr)
            fp.moments.update(arr)
        if fp.values is not None:
            if not np.array_equal(arr, np.floor(arr)):
                fp.values = None
            else:
                fp.values.update(str(int(v)) for v in arr.tolist())
                if len(fp.values) > DISCRETE_LIMIT:
                    fp.values = None

    def _drop(self, name: str) -> None:
        self.dropped.add(name)
        self.fields.pop(name, None)

    def merge(self, other: SplitProfile) -> None:
        self.records += other.records
        for name in other.dropped:
            self._drop(name)
        for name, theirs in other.fields.items():
            if name in self.dropped:
                continue
            mine = self.fields.get(name)
            if mine is None:
                mine = self.fields[name] = FieldProfile()
                mine.kind = theirs.kind
            if mine.kind != theirs.kind:
                self._drop(name)
                continue
            mine.count += theirs.count
            mine.moments.merge(theirs.moments)
            if theirs.kll is not None:
                if mine.kll is None:
                    mine.kll = sketches.new_kll(_KLL_K)
                mine.kll.merge(theirs.kll)
            mine.values = (
                None if mine.values is None or theirs.values is None else mine.values + theirs.values
            )
            limit = CATEGORY_LIMIT if mine.kind == "cat" else DISCRETE_LIMIT
            if mine.values is not None and len(mine.values) > limit:
                if mine.kind == "cat":
                    self._drop(name)
                else:
                    mine.values = None

    def state(self) -> dict[str, Any]:
        fields = {}
        for name, fp in self.fields.items():
            fields[name] = {
                "kind": fp.kind,
                "count": fp.count,
                "moments": fp.moments.state(),
                "kll": None if fp.kll is None else base64.b64encode(fp.kll.serialize()).decode(),
                "values": None if fp.values is None else dict(fp.values),
            }
        return {"records": self.records, "fields": fields, "dropped": sorted(self.dropped)}

    @staticmethod
    def from_state(d: dict[str, Any]) -> SplitProfile:
        p = SplitProfile()
        p.records, p.dropped = int(d["records"]), set(d["dropped"])
        for name, f in d["fields"].items():
            fp = FieldProfile()
            fp.kind, fp.count, fp.moments = f["kind"], int(f["count"]), Moments.from_state(f["moments"])
            fp.kll = None if f["kll"] is None else sketches.load_kll(base64.b64decode(f["kll"]))
            fp.values = None if f["values"] is None else Counter(f["values"])
            p.fields[name] = fp
        return p

    def field_doc(self, name: str) -> dict[str, Any]:
        """The field as a ``stats.json`` entry, as far as the drift code reads one."""
        fp = self.fields[name]
        if fp.kind == "cat":
            values = [{"value": v, "count": c} for v, c in sorted((fp.values or {}).items())]
            string = {"count": fp.count, "values": values, "top": [], "top_max_error": 0}
            return {"count": fp.count, "types": {"string": fp.count}, "string": string}
        sketch = None
        if fp.kll is not None and not fp.kll.is_empty():
            sketch = base64.b64encode(fp.kll.serialize()).decode()
        counts = None
        if fp.values is not None:
            counts = [
                {"value": int(v), "count": c} for v, c in sorted(fp.values.items(), key=lambda t: int(t[0]))
            ]
        num = {**fp.moments.result(), "std_pop": fp.moments.std(0), "finite": fp.moments.count, "nan": 0}
        num.update(sketch=sketch, value_counts=counts)
        return {"count": fp.count, "types": {"float": fp.count}, "numeric": num}


def split_drift(profiles: dict[str, SplitProfile]) -> tuple[dict[str, Any], list[str]]:
    """Each split against the whole (the union of the splits): ``({split: {field: result}}, warnings)``."""
    from torchx_datapipes.schema.drift import compare_field, decide

    whole = SplitProfile()
    for p in profiles.values():
        whole.merge(p)
    out: dict[str, Any] = {}
    warnings = []
    for split, p in profiles.items():
        out[split] = {}
        for name in whole.fields:
            if name not in p.fields:
                continue
            d = decide(compare_field(name, whole.field_doc(name), p.field_doc(name)))
            if not d.checked:
                continue
            out[split][name] = {
                "kind": d.kind,
                "method": d.method,
                "value": d.value,
                "threshold": d.threshold,
                "drifted": d.drifted,
            }
            if d.drifted:
                rel = "<" if d.method in ("ks", "chi2") else ">"
                warnings.append(
                    f"split {split!r} drifts from the whole data set on field {name!r} ({d.method}"
                    f" {d.value:.3g} {rel} {d.threshold:g}, {d.n_b:,} of {d.n_a:,} values): a --key that"
                    " groups records (e.g. by user) can put most of one kind into one split; check --key, or"
                    " use --stratify"
                )
    return out, warnings
