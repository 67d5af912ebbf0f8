"""From merged checks to ``anomalies.json``: descriptions, severities, presence, counts and drift."""

from __future__ import annotations

from typing import Any

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.schema.anomalies import SEVERITY_RANK, Found, anomaly
from torchx_datapipes.schema.compare import compare_docs
from torchx_datapipes.schema.drift import Drift
from torchx_datapipes.schema.model import KINDS, FieldSchema, Schema

FAIL_ON = ("error", "warning", "never")


class AnomaliesFoundError(DatapipesError, ValueError):
    """The data broke the schema: anomalies at or above ``--fail_on`` (the message lists them)."""


def build(
    schema: Schema, doc: dict[str, Any], found: Found, baseline: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[Drift]]:
    """``(anomalies, drifts)``: every anomaly, most severe first, and the per-field drift results."""
    records = int(doc.get("records", 0))
    dropped = dropped_fields(schema, doc)
    out = []
    for (name, kind), it in found.items.items():
        fs = schema.fields.get(name)
        extra: dict[str, Any] = {"count": it["count"]}
        if kind == "unexpected_values":
            extra["values"] = dict(sorted(it["values"].items(), key=lambda t: (-t[1], t[0])))
        text = _describe(name, kind, it["count"], records, fs, doc, extra.get("values"))
        if kind == "missing_field" and name in dropped:
            text = dropped_text(name, records)
        out.append(anomaly(name, kind, schema.severity_of(kind), text, it["examples"], **extra))
    for name in dropped:  # optional fields (a required one's records are counted above)
        if (name, "missing_field") not in found.items:
            text = dropped_text(name, records)
            out.append(
                anomaly(name, "missing_field", schema.severity_of("missing_field"), text, count=records)
            )
    for name, fs in schema.fields.items():
        if name in dropped:
            continue  # reported as missing_field, whatever the schema's presence
        present = int((doc["fields"].get(name) or {}).get("count", 0))
        if not fs.required and fs.min_fraction > 0 and records and present / records < fs.min_fraction:
            text = (
                f"{name!r} is present in {present:,} of {records:,} records ({present / records:.1%}),"
                f" below the schema's min_fraction {fs.min_fraction:g}"
            )
            out.append(anomaly(name, "low_presence", schema.severity_of("low_presence"), text, count=present))
    if records < schema.min_records or (schema.max_records is not None and records > schema.max_records):
        bound = (
            f"[{schema.min_records:,}, {'∞' if schema.max_records is None else f'{schema.max_records:,}'}]"
        )
        text = f"{records:,} records, outside the schema's range {bound} (min_records, max_records)"
        out.append(anomaly("*", "record_count", schema.severity_of("record_count"), text, count=records))
    drifts: list[Drift] = []
    if baseline is not None:
        drifts = compare_docs(baseline, doc, schema)
        for d in drifts:
            if d.drifted:
                out.append(
                    anomaly(d.field, "drift", schema.severity_of("drift"), drift_text(d), **_drift_extra(d))
                )
    out.sort(key=lambda a: (-SEVERITY_RANK[a["severity"]], KINDS.index(a["kind"]), a["field"]))
    return out, drifts


def dropped_fields(schema: Schema, doc: dict[str, Any]) -> list[str]:
    """The schema's fields that no record has, not even as null (TFDV's "column dropped")."""
    if not int(doc.get("records", 0)):
        return []
    return [name for name in schema.fields if name not in doc["fields"]]


def dropped_text(name: str, records: int) -> str:
    return (
        f"{name!r} is absent from all {records:,} records: the field (a CSV column) was dropped from the"
        f" input; restore it in the input, or remove {name!r} from the schema if it is gone for good"
    )


_METHOD_NAMES = {
    "ks": "KS test p",
    "chi2": "chi-square test p",
    "js": "Jensen-Shannon divergence",
    "linf": "L∞ distance",
    "psi": "PSI",
    "wasserstein": "normalized Wasserstein",
}


def drift_text(d: Drift) -> str:
    what = _METHOD_NAMES[d.method]
    if d.correction == "holm":
        what += (
            f" (Holm-adjusted over {d.tests} tested fields; raw {d.distances.get(d.method + '_p') or 0:.4g})"
        )
    rel = "<" if d.method in ("ks", "chi2") else ">"
    err = d.errors.get(d.method)
    pm = f" ± {err:.2g}" if err else ""
    return (
        f"{d.kind} distribution drifted from the baseline: {what} = {d.value:.4g}{pm} {rel} threshold"
        f" {d.threshold:g} ({d.n_a:,} vs {d.n_b:,} values)"
    )


def _drift_extra(d: Drift) -> dict[str, Any]:
    return {"method": d.method, "value": d.value, "threshold": d.threshold, "distances": d.distances}


def _describe(
    name: str, kind: str, n: int, records: int, fs: FieldSchema | None, doc: dict[str, Any], values: Any
) -> str:
    f = doc["fields"].get(name) or {}
    if kind == "missing_field":
        return f"{n:,} of {records:,} records lack the required field {name!r} (absent or null)"
    if kind == "new_field":
        return f"{name!r} is not in the schema; {n:,} records have it (add it to the schema if expected)"
    assert fs is not None
    if kind == "type_mismatch":
        types = {k: int(v) for k, v in f.get("types", {}).items() if k != "null"}
        seen = ", ".join(f"{k} {v:,}" for k, v in types.items())
        read = next(iter(types)) if len(types) == 1 else ""  # CSV: one word makes a whole column text
        numeric = set(fs.type) & {"int", "float"}
        if numeric and read in ("string", "float") and read not in fs.type and 0 < n < types[read]:
            return (
                f"{n:,} values are not {' or '.join(fs.type)} (types seen: {seen}; the column was read as"
                f" {read} because of them, its other {types[read] - n:,} values are numbers and were checked"
                " as such)"
            )
        return f"{n:,} values are not {' or '.join(fs.type)} (types seen: {seen})"
    if kind == "out_of_range":
        lo = "-∞" if fs.min is None else f"{fs.min:g}"
        hi = "∞" if fs.max is None else f"{fs.max:g}"
        inf = "" if fs.allow_inf else "; ±inf is not allowed (allow_inf)"
        return f"{n:,} values outside the schema's range [{lo}, {hi}]{inf}"
    if kind == "unexpected_values":
        shown = ", ".join(f"{v!r} ({c:,})" for v, c in list((values or {}).items())[:10])
        size = len(fs.domain or [])
        return f"{n:,} values outside the schema's domain of {size} values; unseen values: {shown}"
    if kind == "nan_present":
        return f"{n:,} NaN values; the schema does not allow NaN (allow_nan: false)"
    if kind == "shape_mismatch":
        want = " ".join(
            x for x in (f"dtype {fs.dtype}" if fs.dtype else "", f"shape {fs.shape}" if fs.shape else "") if x
        )
        return f"{n:,} values do not have {want}"
    return f"{n:,} records"


def failure_message(failing: list[dict[str, Any]], fail_on: str, output: str, schema_url: str) -> str:
    lines = []
    for a in failing[:10]:
        ex = a["examples"][0] if a["examples"] else None
        where = f" e.g. {ex['file']}:{ex['line']} value {ex['value']!r}" if ex else ""
        lines.append(f"{a['field']}: {a['kind']} ({a['severity']}): {a['description']}{where}")
    more = f"; and {len(failing) - 10} more" if len(failing) > 10 else ""
    return (
        f"validation failed: {len(failing)} anomal{'y' if len(failing) == 1 else 'ies'} at or above"
        f" --fail_on {fail_on}: " + "; ".join(lines) + more + f". Details: {output}/anomalies.json and"
        f" {output}/report.html. Fix the data, or edit {schema_url} if the change is expected"
        " (or set a kind's severity there), or pass --fail_on warning/never"
    )
