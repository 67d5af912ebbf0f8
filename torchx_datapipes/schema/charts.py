"""Overlaid baseline/current charts (matplotlib Agg, no pyplot) for the comparison page."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchx_datapipes.stats.charts import _PLAIN, _figure, _label, _png, _style

_BASE = "#9aa4b2"
_CURRENT = "#4c78a8"
_DRIFT = "#e45756"


def overlay_png(name: str, kind: str, hist: dict[str, Any], drifted: bool) -> bytes:
    """Numeric: densities over the aligned bins; categorical: grouped bars of the frequencies."""
    fig = _figure(6.0, 2.8)
    ax = fig.add_subplot()
    colour = _DRIFT if drifted else _CURRENT
    if kind == "numeric":
        edges = np.asarray(hist["edges"], dtype=np.float64)
        widths = np.diff(edges)
        widths[widths <= 0] = 1.0
        p, q = np.asarray(hist["p"]) / widths, np.asarray(hist["q"]) / widths
        ax.stairs(p, edges, fill=True, color=_BASE, alpha=0.6, label="baseline")
        ax.stairs(q, edges, color=colour, linewidth=1.8, label="current")
        ax.set_ylabel("density", fontsize=8, **_PLAIN)
        fig.subplots_adjust(left=0.12, right=0.98, top=0.88, bottom=0.12)
    else:
        labels = [_label(str(v), 18) or "(empty)" for v in hist["labels"]][:20]
        xs = np.arange(len(labels))
        ax.bar(xs - 0.2, hist["p"][: len(labels)], width=0.4, color=_BASE, label="baseline")
        ax.bar(xs + 0.2, hist["q"][: len(labels)], width=0.4, color=colour, label="current")
        ax.set_xticks(xs, labels, fontsize=7, rotation=45 if len(labels) > 6 else 0, ha="right", **_PLAIN)
        ax.set_ylabel("share", fontsize=8, **_PLAIN)
        fig.subplots_adjust(left=0.12, right=0.98, top=0.88, bottom=0.3)
    legend = ax.legend(fontsize=8, framealpha=0.9, edgecolor="none")
    for text in legend.get_texts():
        text.update(_PLAIN)
    note = "DRIFT" if drifted else "no drift"
    ax.set_title(f"{_label(name, 50)} — baseline vs current ({note})", fontsize=9, loc="left", **_PLAIN)
    _style(ax)
    return _png(fig)


def single_png(name: str, f: dict[str, Any]) -> bytes | None:
    """The current side alone (no baseline): the stats report's own chart for the field."""
    from torchx_datapipes.stats import charts
    from torchx_datapipes.stats.summary import near_unique

    num, s = f.get("numeric") or {}, f.get("string") or {}
    if num.get("value_counts"):
        return charts.value_bars_png(name, num)
    if num.get("histogram"):
        return charts.histogram_png(name, num)
    if s.get("top") and not near_unique(s):
        return charts.top_k_png(name, s)
    return None
