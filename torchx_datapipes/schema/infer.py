"""Infer a :class:`Schema` from a ``stats.json`` document, with TFDV's rules as the start.

- ``type``: the value types seen (nulls aside); a float field also accepts ints.
- presence: ``required`` when never missing (TFDV's ``min_fraction = 1.0``); else ``min_fraction``
  is the observed present fraction less :data:`PRESENCE_SLACK`, rounded down to 0.01.
- numeric range: only with ``ranges=True`` (observed min and max); TFDV infers none either.
- ``domain``: every value of a string field with at most 100 distinct values (TFDV's
  ``max_string_domain_size``), unless the field is id-like.
- ``dtype``/``shape``: a tensor field's dtypes, and its shape (or a list field's) when one.
- ``allow_nan``/``allow_inf``: whether the profiled data had any.
- id-like fields (``stats.flags``) get no domain and no drift check.
"""

from __future__ import annotations

import math
from typing import Any

from torchx_datapipes.schema.model import FieldSchema, Schema
from torchx_datapipes.stats.flags import is_id_like

PRESENCE_SLACK = 0.1  # relative: a field present in 80% of records needs 72% or more


def infer(doc: dict[str, Any], ranges: bool = False, source: str = "") -> Schema:
    """The schema of the data ``doc`` (a stats or validate output's ``stats.json``) describes."""
    records = int(doc.get("records", 0))
    fields = {name: infer_field(f, records, ranges) for name, f in doc.get("fields", {}).items()}
    return Schema(fields=fields, min_records=1, source={"stats": source, "records": records})


def infer_field(f: dict[str, Any], records: int, ranges: bool = False) -> FieldSchema:
    types = sorted(k for k in f.get("types", {}) if k != "null")
    count = int(f.get("count", 0))
    fs = FieldSchema(type=types)
    fs.required = records > 0 and count == records
    if fs.required:
        fs.min_fraction = 1.0
    elif records:
        frac = count / records * (1 - PRESENCE_SLACK)
        fs.min_fraction = math.floor(frac * 100) / 100
    fs.id_like = "id-like" in f.get("flags", ()) or is_id_like(f)
    num = f.get("numeric") or {}
    fs.allow_nan = bool(f.get("nan") or num.get("nan"))
    fs.allow_inf = bool(num.get("pos_inf") or num.get("neg_inf"))
    if ranges and num.get("min") is not None:
        fs.min, fs.max = float(num["min"]), float(num["max"])
    s = f.get("string") or {}
    if s.get("values") is not None and not fs.id_like:
        fs.domain = [v["value"] for v in s["values"]]
    tensor = f.get("tensor") or {}
    if tensor:
        fs.dtype = sorted(tensor.get("dtypes", {}))
    shaped = tensor or (f.get("list") or {})
    shapes = shaped.get("shapes") or []
    if len(shapes) == 1 and shaped.get("distinct_shapes") == 1:
        fs.shape = list(shapes[0]["shape"])
    fs.drift = not fs.id_like
    return fs
