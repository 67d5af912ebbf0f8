"""``report.html`` (one self-contained page) and ``stats.md``, written through fsspec.

The page loads nothing from the network: CSS is inline, fonts are the system's, and every
chart is a PNG embedded as a ``data:`` URI. Every field name and value is HTML-escaped.

Wide tables: charts are drawn for the first :data:`MAX_CHARTED_FIELDS` fields only (in report
order); every field keeps its card of statistics and its row in the summary table, and a note
above the cards says how many were drawn. The charts are drawn together, on the spare cores
(:func:`charts.draw_all`), so the report's time is linear in fields and bounded in charts: 10,000
columns used to spend over 14 minutes drawing one chart after another.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from torchx_datapipes.io.checksum import write_file
from torchx_datapipes.stats.markdown import render_markdown
from torchx_datapipes.stats.summary import (
    COLUMNS,
    fmt,
    near_unique,
    pct,
    rows,
    run_info,
    shape_text,
    type_label,
    wrap_name,
)

REPORT_HTML = "report.html"
STATS_MD = "stats.md"
MAX_CHARTED_FIELDS = 100
"""Fields with charts, the first ones in report order (a chart costs ~50-100 ms to draw)."""

_Chart = tuple[str, str, str, str, dict[str, Any]]  # element id, alt text, kind, label, section

_CSS = """
body{margin:0;background:#f6f7f9;color:#1d2330;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1200px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:24px;margin:0 0 12px}h2{font-size:18px;margin:28px 0 10px}
h3{font-size:16px;margin:0 0 8px;overflow-wrap:break-word;
font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.run{display:flex;flex-wrap:wrap;gap:10px;margin:0}
.run div{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:8px 14px;max-width:100%}
.run dt{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:#6b7385}
.run dd{margin:0;font-weight:600;overflow-wrap:anywhere}
.scroll{overflow-x:auto;background:#fff;border:1px solid #e1e4ea;border-radius:8px}
table{border-collapse:collapse;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid #eceef2;text-align:right;white-space:nowrap}
th{background:#f0f2f6;font-size:12px;color:#4a5264;position:sticky;top:0}
td.l,th.l{text-align:left}tr:last-child td{border-bottom:0}
.summary td.l{white-space:normal;max-width:240px;overflow-wrap:break-word}
td.l a{color:#2b5fad;text-decoration:none;font-family:ui-monospace,Menlo,Consolas,monospace}
.fields{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:16px}
.field{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:14px 16px}
.type{font:12px system-ui,sans-serif;color:#fff;background:#6b7385;border-radius:10px;padding:1px 8px;
margin-left:8px;vertical-align:middle}
.kv td{padding:3px 8px;font-size:12.5px;white-space:normal;overflow-wrap:anywhere}
.kv td:first-child{text-align:left;color:#6b7385;white-space:nowrap;width:1%}
figure{margin:10px 0 0}img{max-width:100%;height:auto;display:block}
.note{color:#4a5264;margin:0 0 12px}
footer{margin-top:32px;color:#6b7385;font-size:12px}
"""


def write_reports(doc: dict[str, Any], out_dir: str, charted: int = MAX_CHARTED_FIELDS) -> list[str]:
    """Write ``report.html`` and ``stats.md`` for ``doc`` into ``out_dir`` atomically; return their URLs.

    Args:
        doc: a :meth:`StatsPartial.result` document, plus any runner keys such as
            ``schema_version``, ``bad_records``, ``inputs`` or ``manifest`` (shown in the header).
        out_dir: a local path or fsspec URL (``memory://``, ``s3://``...); created if needed.
        charted: charts are drawn for this many fields, the first ones (0: none).
    """
    out = []
    for name, text in ((REPORT_HTML, render_html(doc, charted)), (STATS_MD, render_markdown(doc))):
        url = out_dir.rstrip("/") + "/" + name
        write_file(url, text.encode("utf-8"))  # atomic; disk full names the file and leaves no part of it
        out.append(url)
    return out


def render_html(doc: dict[str, Any], charted: int = MAX_CHARTED_FIELDS) -> str:
    if charted < 0:
        raise ValueError(f"charted must be >= 0 (fields drawn with charts), got {charted}")
    e = _esc
    run = "".join(f"<div><dt>{e(k)}</dt><dd>{e(v)}</dd></div>" for k, v in run_info(doc))
    fields = doc.get("fields", {})
    records = int(doc.get("records", 0))
    imgs = _drawn({name: _charts(name, f) for name, f in list(fields.items())[:charted]})
    cards = "".join(_field_card(name, f, records, imgs.get(name, "")) for name, f in fields.items())
    note = ""
    if len(fields) > charted:
        note = (
            f'<p class="note">Charts are drawn for the first {charted:,} of {len(fields):,} fields;'
            " the other fields have their statistics below without charts (and every field is in"
            " the summary table).</p>"
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Dataset statistics</title><style>{_CSS}</style></head><body><main>"
        f'<h1>Dataset statistics</h1><dl class="run">{run}</dl>'
        f'<h2>Summary</h2><div class="scroll">{_summary_table(doc)}</div>'
        f'<h2>Fields</h2>{note}<div class="fields">{cards}</div>'
        "<footer>Numeric statistics describe finite values; NaN and null count as missing, ±inf "
        "separately. Dates and timestamps are shown in UTC (naive ones as they are). "
        "≈ marks sketch estimates (KLL quantiles, HyperLogLog distinct counts, frequent-items top-k); "
        f"their error bounds are part of stats.json. Schema version {e(doc.get('schema_version', '–'))}."
        "</footer></main></body></html>\n"
    )


def _summary_table(doc: dict[str, Any]) -> str:
    head = "".join(f'<th class="{_cls(c)}">{_esc(c)}</th>' for c in COLUMNS)
    body = []
    for row in rows(doc):
        name = row.cells[0]
        first = f'<td class="l"><a href="#field-{_esc(name)}" title="{_esc(name)}">{wrap_name(name)}</a></td>'
        rest = "".join(
            f'<td class="{_cls(c)}">{_esc(v)}</td>' for c, v in zip(COLUMNS[1:], row.cells[1:], strict=True)
        )
        body.append(f"<tr>{first}{rest}</tr>")
    return f'<table class="summary"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _drawn(specs: dict[str, list[_Chart]]) -> dict[str, str]:
    """Each field's ``<figure>`` elements, its charts drawn together with every other field's."""
    if not any(specs.values()):
        return {}
    from torchx_datapipes.stats import charts  # lazy: workers that only accumulate never import matplotlib

    jobs = [(kind, label, section) for chart in specs.values() for _, _, kind, label, section in chart]
    pngs = iter(charts.draw_all(jobs))
    return {
        name: "".join(_img(element_id, alt, next(pngs)) for element_id, alt, *_ in chart)
        for name, chart in specs.items()
    }


def _field_card(name: str, f: dict[str, Any], records: int, imgs: str) -> str:
    kv = [("count", fmt(f["count"])), ("missing (absent or null)", pct(f["missing"], records))]
    if f.get("null"):
        kv.append(("null", fmt(f["null"])))
    if f.get("nan"):
        kv.append(("NaN (counted as missing)", fmt(f["nan"])))
    if len(f["types"]) > 1:
        kv.append(("types", ", ".join(f"{k} {fmt(n)}" for k, n in f["types"].items())))
    if f.get("bool"):
        kv.append(("true / false", f"{fmt(f['bool']['true'])} / {fmt(f['bool']['false'])}"))
    kv += _numeric_kv("", f.get("numeric"))
    kv += _string_kv("", f.get("string"))
    if f.get("list"):
        length = f["list"]["length"]
        kv.append(
            (
                "list length min / mean / max",
                f"{fmt(length['min'])} / {fmt(length['mean'])} / {fmt(length['max'])}",
            )
        )
        el = f["list"]["elements"]
        kv.append(("elements", f"{fmt(el['count'])} ({type_label(el['types'])})"))
        if f["list"].get("shapes"):
            kv.append(("list shapes", _shapes(f["list"])))
        kv += _numeric_kv("elements ", el.get("numeric"))
        kv += _string_kv("elements ", el.get("string"))
    kv += _typed_kv(f)
    table = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in kv)
    return (
        f'<section class="field" id="field-{_esc(name)}"><h3 title="{_esc(name)}">{wrap_name(name)}'
        f'<span class="type">{_esc(type_label(f["types"]))}</span></h3>'
        f'<table class="kv">{table}</table>{imgs}</section>'
    )


def _numeric_kv(prefix: str, num: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not num:
        return []
    out = [
        (prefix + "mean ± std (sample)", f"{fmt(num['mean'])} ± {fmt(num['std_sample'])}"),
        (prefix + "min / max", f"{fmt(num['min'])} / {fmt(num['max'])}"),
        (prefix + "sum", fmt(num["sum"])),
    ]
    specials = [(k, num[k]) for k in ("zeros", "nan", "pos_inf", "neg_inf") if num[k]]
    if specials:
        out.append(
            (
                prefix + "zeros / NaN / +inf / −inf",
                " / ".join(fmt(num[k]) for k in ("zeros", "nan", "pos_inf", "neg_inf")),
            )
        )
    if num["median"] is not None:
        err = (
            "exact, linear interpolation"
            if num["quantiles_exact"]
            else f"≈ sketch estimates, rank error ±{100 * num['quantile_rank_error']:.2g}%"
        )
        qs = ", ".join(f"p{100 * q['q']:g}={fmt(q['value'])}" for q in num["quantiles"])
        out.append((prefix + f"quantiles ({err})", qs))
    return out


def _shapes(section: dict[str, Any]) -> str:
    shown = ", ".join(f"{shape_text(s['shape'])} ({fmt(s['count'])})" for s in section["shapes"][:5])
    more = section["distinct_shapes"]
    total = f"{fmt(more)} distinct" if more is not None else "many distinct"
    return f"{shown}; {total}"


def _typed_kv(f: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind in ("datetime", "date"):
        t = f.get(kind)
        if t:
            out.append((f"{kind} min / median / max", f"{t['min']} / {t['median']} / {t['max']}"))
            tz = t.get("timezone")
            if tz and tz["aware"] and tz["naive"]:
                out.append(("timezone", f"{fmt(tz['aware'])} aware (UTC), {fmt(tz['naive'])} naive"))
    if f.get("bytes"):
        length = f["bytes"]["length"]
        out.append(
            (
                "bytes length min / mean / max",
                f"{fmt(length['min'])} / {fmt(length['mean'])} / {fmt(length['max'])}",
            )
        )
    t = f.get("tensor")
    if t:
        out.append(("tensor dtype", ", ".join(f"{k} {fmt(n)}" for k, n in t["dtypes"].items())))
        out.append(("tensor shape", _shapes(t)))
        out.append(
            (
                "tensor elements min / mean / max",
                f"{fmt(t['numel']['min'])} / {fmt(t['numel']['mean'])} / {fmt(t['numel']['max'])}",
            )
        )
        out += _numeric_kv("element ", t.get("elements"))
    return out


def _string_kv(prefix: str, s: dict[str, Any] | None) -> list[tuple[str, str]]:
    if not s:
        return []
    d = s["distinct"]
    distinct = fmt(d["value"]) if d["exact"] else f"≈{fmt(d['value'])} [{fmt(d['lower'])}, {fmt(d['upper'])}]"
    length = s["length"]
    return [
        (prefix + "distinct", distinct),
        (
            prefix + "length min / mean / max",
            f"{fmt(length['min'])} / {fmt(length['mean'])} / {fmt(length['max'])}",
        ),
    ]


def _charts(name: str, f: dict[str, Any]) -> list[_Chart]:
    """``(id, alt text, kind, label, section)`` per chart of a field: its values, then its list elements."""
    out: list[_Chart] = []
    tensor = f.get("tensor") or {}
    sections: list[tuple[str, dict[str, Any]]] = [
        ("", f),
        ("[]", (f.get("list") or {}).get("elements") or {}),
        (" (tensor elements)", {"numeric": tensor.get("elements")}),
        (" (bytes length)", {"numeric": (f.get("bytes") or {}).get("length")}),
    ]
    for kind in ("datetime", "date"):
        t = f.get(kind)
        if t and t.get("histogram"):
            if kind == "date" and t["epoch_s"].get("value_counts"):  # few distinct days: one bar each
                days = {"value_counts": _day_counts(t["epoch_s"]["value_counts"])}
                sections.append((" (per day)", {"numeric": days}))
            else:
                out.append((f"time-{name}", f"time histogram of {name}", "time", name, t))
    for suffix, section in sections:
        label = name + suffix
        num, s = section.get("numeric"), section.get("string")
        if num and num.get("value_counts"):
            out.append((f"bars-{label}", f"value counts of {label}", "bars", label, num))
        elif num and num.get("histogram"):
            out.append((f"hist-{label}", f"histogram of {label}", "hist", label, num))
        if s and s.get("top") and not near_unique(s):  # bars of height 1 say nothing
            out.append((f"topk-{label}", f"top values of {label}", "topk", label, s))
    return out


def _day_counts(value_counts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from torchx_datapipes.stats.typed import iso

    return [{"value": iso(float(v["value"]), date_only=True), "count": v["count"]} for v in value_counts]


def _img(element_id: str, alt: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img id="{_esc(element_id)}" alt="{_esc(alt)}" src="data:image/png;base64,{data}"></figure>'
    )


def _cls(column: str) -> str:
    return "l" if column in ("field", "type", "top value") else "r"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
