"""One summary row per field, shared by ``report.html`` and ``stats.md``."""

from __future__ import annotations

import html
import json
import math
import posixpath
import re
from dataclasses import dataclass
from typing import Any

COLUMNS = (
    "field",
    "type",
    "count",
    "missing",
    "mean",
    "std",
    "min",
    "median",
    "max",
    "distinct",
    "top value",
)
_BUILTIN_KEYS = {"records", "fields", "config", "manifest"}  # manifest: in stats.json, too long for a box


@dataclass(frozen=True)
class Row:
    """Display strings (not escaped) for one field."""

    cells: tuple[str, ...]


def fmt(v: Any) -> str:
    """Compact human formatting: thousands separators for ints, 4 significant digits for floats."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        if 1e-3 <= abs(v) < 1e6:  # 4 significant digits without an exponent
            decimals = max(0, 3 - math.floor(math.log10(abs(v))))
            return f"{v:,.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{v:,.0f}"
        return f"{v:.4g}"
    return str(v)


def type_label(types: dict[str, int]) -> str:
    """``float`` for one type, else ``int 60% · string 40%`` (nulls excluded)."""
    kinds = {k: n for k, n in types.items() if k != "null"}
    total = sum(kinds.values())
    if not kinds:
        return "null" if types else "–"
    if len(kinds) == 1:
        return next(iter(kinds))
    ranked = sorted(kinds.items(), key=lambda t: -t[1])
    return " · ".join(f"{k} {share(n, total)}" for k, n in ranked)


def share(part: int, whole: int) -> str:
    """A percentage that never rounds a present minority to 0% nor a partial majority to 100%."""
    p = 100 * part / whole
    if 0 < p < 0.5:
        return "<1%"
    if 99.5 <= p < 100:
        return ">99%"
    return f"{p:.0f}%"


def near_unique(s: dict[str, Any]) -> bool:
    """No value of a string section repeats, as far as the counts can tell.

    Exact counts: the most frequent value occurs once. Sketch counts: no value's guaranteed
    count (its lower bound) exceeds the sketch's error, so a top-k chart would show noise.
    """
    top = s.get("top") or []
    if not top:
        return True
    if s.get("top_exact"):
        return int(top[0]["count"]) <= 1
    return int(top[0]["lower"]) <= int(s.get("top_max_error") or 0)


def flags(f: dict[str, Any]) -> list[str]:
    """``constant`` (one distinct non-null value) and ``id-like`` (every value distinct) flags."""
    from torchx_datapipes.stats.flags import field_flags

    return list(f["flags"]) if "flags" in f else field_flags(f)


def pct(part: int, whole: int) -> str:
    return f"{fmt(part)} ({100 * part / whole:.1f}%)" if whole else fmt(part)


def shape_text(shape: list[int]) -> str:
    return "×".join(map(str, shape)) if shape else "scalar"


def field_row(name: str, f: dict[str, Any], records: int) -> Row:
    tensor = f.get("tensor") or {}
    num = f.get("numeric") or tensor.get("elements") or {}
    s = f.get("string") or {}
    time = f.get("datetime") or f.get("date") or {}
    distinct, top = "–", "–"
    approx = "≈" if num and not num.get("quantiles_exact") else ""
    lo, mid, hi = fmt(num.get("min")), approx + fmt(num.get("median")), fmt(num.get("max"))
    if time and not num:
        approx = "" if time["epoch_s"]["quantiles_exact"] else "≈"
        lo, mid, hi = fmt(time["min"]), approx + fmt(time["median"]), fmt(time["max"])
    if tensor and tensor.get("shapes"):
        t = tensor["shapes"][0]
        dtypes = "/".join(tensor["dtypes"])
        top = f"{dtypes} {shape_text(t['shape'])} ({fmt(t['count'])})"
    elif f.get("bytes"):
        length = f["bytes"]["length"]
        top = f"bytes, length {fmt(length['min'])}–{fmt(length['max'])}"
    if s:
        d = s["distinct"]
        distinct = fmt(d["value"]) if d["exact"] else f"≈{fmt(d['value'])}"
        if s["top"] and near_unique(s) and s["top_exact"]:
            top = "none repeated (every value distinct)"
        elif s["top"]:
            t = s["top"][0]
            err = "" if s["top_exact"] else "±" + fmt(s["top_max_error"])
            if not s["top_exact"] and t["lower"] <= s["top_max_error"]:
                top = f"none above the sketch error (±{fmt(s['top_max_error'])}); values near-unique"
            else:
                top = f"{shorten(t['value'])} ({fmt(t['count'])}{err})"
    elif f.get("bool") and top == "–":
        top = f"true {fmt(f['bool']['true'])} · false {fmt(f['bool']['false'])}"
    return Row(
        (
            name,
            " · ".join([type_label(f["types"]), *flags(f)]),
            fmt(f["count"]),
            pct(f["missing"], records),
            fmt(num.get("mean")),
            fmt(num.get("std_sample")),
            lo,
            mid,
            hi,
            distinct,
            top,
        )
    )


def rows(doc: dict[str, Any]) -> list[Row]:
    records = int(doc.get("records", 0))
    return [field_row(name, f, records) for name, f in doc.get("fields", {}).items()]


def run_info(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` pairs for the header: records, bad records and any runner extras."""
    out = [("records", fmt(doc.get("records", 0)))]
    for key, value in doc.items():
        if key in _BUILTIN_KEYS or _empty(value):
            continue
        if key == "inputs" and isinstance(value, list):  # file names, not dict dumps
            value = [posixpath.basename(str(v.get("path", v))) if isinstance(v, dict) else v for v in value]
        out.append((key.replace("_", " "), describe(value)))
    return out


def _empty(value: Any) -> bool:
    """Nothing worth a header box: None, or a dict of Nones (e.g. no --fn artifact)."""
    return value is None or (isinstance(value, dict) and all(v is None for v in value.values()))


def describe(value: Any) -> str:
    """A one-line rendering of an arbitrary runner-supplied value."""
    if isinstance(value, list):
        shown = ", ".join(str(v) for v in value[:3])
        return f"{len(value)}: {shorten(shown, 120)}{', …' if len(value) > 3 else ''}"
    if isinstance(value, dict):
        return shorten(json.dumps(value, default=str, sort_keys=True), 160)
    return fmt(value)


def shorten(text: str, limit: int = 40) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_BREAK = re.compile(r"(?<=[_./:-])(?![_./:-])|(?<=[a-z0-9])(?=[A-Z])")


def wrap_name(name: str) -> str:
    """HTML of a field name that wraps at word boundaries: ``<wbr>`` after ``_ . / : -`` and
    between camelCase words, so ``bill_length_mm`` breaks as ``bill_ length_ mm``, never mid-word."""
    return "<wbr>".join(html.escape(p, quote=True) for p in _BREAK.split(str(name)) if p)
