"""The validation / comparison page: baseline against current, one self-contained offline HTML file.

Anomalies come first, each with its example records (file, line, value); then the drift table
(drifting fields highlighted); then one card per field with both sides' key statistics next to
each other and an overlaid chart (baseline filled grey, current outlined blue). Charts are PNGs
in ``data:`` URIs, CSS is inline, and every name and value is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
from typing import Any

from torchx_datapipes.io.checksum import write_file
from torchx_datapipes.schema.drift import Drift
from torchx_datapipes.stats.summary import fmt, pct, type_label, wrap_name

_CSS = """
body{margin:0;background:#f6f7f9;color:#1d2330;
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1280px;margin:0 auto;padding:24px 28px 48px}h1{font-size:24px;margin:0 0 8px}
h2{font-size:18px;margin:28px 0 10px}h3{font-size:16px;margin:0 0 8px;overflow-wrap:break-word;
font-family:ui-monospace,Menlo,Consolas,monospace}
.box{background:#fff;border:1px solid #e1e4ea;border-radius:8px;overflow-x:auto}
table{border-collapse:collapse;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid #eceef2;text-align:left;
vertical-align:top}th{background:#f0f2f6;font-size:12px;color:#4a5264}
td.n{text-align:right;white-space:nowrap}.sev-error{color:#b42318;font-weight:700}
.sev-warning{color:#b54708;font-weight:700}.sev-info{color:#475467}
tr.drifted td{background:#fff1f0}.ok{color:#067647}.bad{color:#b42318;font-weight:700}
.ex{font:12px ui-monospace,Menlo,Consolas,monospace;color:#344054;overflow-wrap:anywhere}
.fields{display:grid;grid-template-columns:repeat(auto-fill,minmax(600px,1fr));gap:16px}
.field{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:14px 16px}
.field.drifted{border:2px solid #e45756;box-shadow:0 0 0 3px #fde2e1}
.badge{font:12px system-ui,sans-serif;color:#fff;background:#6b7385;border-radius:10px;padding:1px 8px;
margin-left:8px}.badge.drift{background:#e45756}.kv td{padding:3px 8px;font-size:12.5px}
img{max-width:100%;height:auto;display:block}
.none{color:#067647;font-weight:600}
"""
_KEYS = ("count", "missing", "mean", "std", "min", "median", "max", "distinct")


def write_report(
    url: str,
    current: dict[str, Any],
    baseline: dict[str, Any] | None,
    drifts: list[Drift],
    anomalies: list[dict[str, Any]] | None,
    title: str,
) -> str:
    """Render and atomically write the page to ``url``; returns ``url``."""
    write_file(url, render(current, baseline, drifts, anomalies, title).encode("utf-8"))
    return url


def render(
    current: dict[str, Any],
    baseline: dict[str, Any] | None,
    drifts: list[Drift],
    anomalies: list[dict[str, Any]] | None,
    title: str,
) -> str:
    e = _esc
    by_field = {d.field: d for d in drifts}
    parts = [f"<h1>{e(title)}</h1>", f"<p>{_header(current, baseline)}</p>"]
    if anomalies is not None:
        parts.append(f"<h2>Anomalies ({len(anomalies)})</h2>{_anomalies(anomalies)}")
    if baseline is not None:
        parts.append(f"<h2>Drift (baseline → current)</h2>{_drift_table(drifts)}")
    names = list(dict.fromkeys([*current.get("fields", {}), *((baseline or {}).get("fields", {}))]))
    cards = "".join(_card(n, current, baseline, by_field.get(n)) for n in names)
    parts.append(f'<h2>Fields</h2><div class="fields">{cards}</div>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body><main>{''.join(parts)}</main></body></html>\n"
    )


def _header(current: dict[str, Any], baseline: dict[str, Any] | None) -> str:
    text = f"current: {fmt(current.get('records', 0))} records"
    if baseline is not None:
        text = f"baseline: {fmt(baseline.get('records', 0))} records · " + text
    return _esc(text)


def _anomalies(anomalies: list[dict[str, Any]]) -> str:
    if not anomalies:
        return '<p class="none">No anomalies: every record matches the schema.</p>'
    rows = []
    for a in anomalies:
        ex = "<br>".join(
            f"{_esc(x['file'])}:{_esc(x['line'])} → {_esc(repr(x['value']))}" for x in a.get("examples", [])
        )
        rows.append(
            f'<tr><td class="sev-{_esc(a["severity"])}">{_esc(a["severity"])}</td>'
            f"<td>{wrap_name(a['field'])}</td>"
            f'<td>{_esc(a["kind"])}</td><td>{_esc(a["description"])}</td><td class="ex">{ex}</td></tr>'
        )
    head = "<tr><th>severity</th><th>field</th><th>kind</th><th>description</th><th>example records</th></tr>"
    return _box("anomalies", head, rows)


def _drift_table(drifts: list[Drift]) -> str:
    rows = []
    for d in drifts:
        cls = ' class="drifted"' if d.drifted else ""
        verdict = (
            '<span class="bad">DRIFT</span>'
            if d.drifted
            else ('<span class="ok">no</span>' if d.checked else _esc(d.note))
        )
        err = d.errors.get(d.method, 0.0) if d.method else 0.0
        value = "–" if d.value is None else f"{d.value:.4g}" + (f" ± {err:.2g}" if err else "")
        dist = " · ".join(f"{k} {v:.3g}" for k, v in d.distances.items() if v is not None)
        rows.append(
            f"<tr{cls}><td>{wrap_name(d.field)}</td><td>{_esc(d.kind)}</td><td>{_esc(d.method or '–')}</td>"
            f'<td class="n">{_esc(value)}</td><td class="n">{_esc(fmt(d.threshold))}</td><td>{verdict}</td>'
            f'<td class="ex">{_esc(dist)}</td></tr>'
        )
    cols = ("field", "kind", "method", "value", "threshold", "drift", "distances")
    head = "<tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
    return _box("drift", head, rows)


def _box(cls: str, head: str, rows: list[str]) -> str:
    body = "".join(rows)
    return f'<div class="box"><table class="{cls}"><thead>{head}</thead><tbody>{body}</tbody></table></div>'


def _card(name: str, current: dict[str, Any], baseline: dict[str, Any] | None, d: Drift | None) -> str:
    fc = current.get("fields", {}).get(name)
    fb = (baseline or {}).get("fields", {}).get(name)
    drifted = d is not None and d.drifted
    badge = '<span class="badge drift">drift</span>' if drifted else ""
    kind = type_label((fc or fb or {}).get("types", {}))
    head = "<tr><td></td>" + ("<th>baseline</th>" if baseline is not None else "") + "<th>current</th></tr>"
    rows = []
    for key in _KEYS:
        cells = ([_stat(fb, key, baseline)] if baseline is not None else []) + [_stat(fc, key, current)]
        rows.append(f"<tr><td>{key}</td>" + "".join(f'<td class="n">{_esc(c)}</td>' for c in cells) + "</tr>")
    chart = _chart(name, fc, fb, d)
    return (
        f'<section class="field{" drifted" if drifted else ""}" id="field-{_esc(name)}">'
        f'<h3 title="{_esc(name)}">'
        f'{wrap_name(name)}<span class="badge">{_esc(kind)}</span>{badge}</h3>'
        f'<table class="kv">{head}{"".join(rows)}</table>{chart}</section>'
    )


def _stat(f: dict[str, Any] | None, key: str, doc: dict[str, Any] | None) -> str:
    if f is None:
        return "(absent)"
    num = f.get("numeric") or {}
    s = f.get("string") or {}
    if key == "count":
        return fmt(f["count"])
    if key == "missing":
        return pct(f["missing"], int((doc or {}).get("records", 0)))
    if key == "std":
        return fmt(num.get("std_sample"))
    if key == "distinct":
        d = s.get("distinct")
        return "–" if not d else (fmt(d["value"]) if d["exact"] else "≈" + fmt(d["value"]))
    return fmt(num.get(key))


def _chart(name: str, fc: dict[str, Any] | None, fb: dict[str, Any] | None, d: Drift | None) -> str:
    from torchx_datapipes.schema import charts

    png = None
    if d is not None and d.hist is not None:
        png = charts.overlay_png(name, d.kind, d.hist, d.drifted)
    elif fc is not None:
        png = charts.single_png(name, fc)
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    alt = f"distribution of {_esc(name)}"
    return f'<figure><img id="chart-{_esc(name)}" alt="{alt}" src="data:image/png;base64,{data}"></figure>'


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
