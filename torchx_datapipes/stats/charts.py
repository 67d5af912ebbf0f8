"""Matplotlib charts rendered to PNG bytes with the Agg canvas.

We build ``matplotlib.figure.Figure`` objects directly instead of using pyplot: no global
figure registry, no backend switch for the caller's process, safe in worker threads.

Field names and values are data, never markup: every Text that can carry them is created with
``parse_math=False`` and ``usetex=False`` (:data:`_PLAIN`), so ``$\\foo$`` or ``$x^2$`` is drawn as
typed instead of being parsed as mathtext (which raised ``ValueError: Unknown symbol``) or sent
to LaTeX. Numeric tick labels keep matplotlib's own formatting (its offsets use mathtext).
"""

from __future__ import annotations

import io
import re
from typing import Any

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("the stats report needs matplotlib: pip install 'torchx-datapipes[stats]'") from e

from torchx_datapipes.stats.summary import fmt, shorten

_BAR = "#4c78a8"
_ACCENT = "#e45756"
_DPI = 100
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # no glyph in any font: drawn as U+FFFD instead
_PLAIN: dict[str, Any] = {"parse_math": False, "usetex": False}  # Text kwargs: draw the string as typed


def histogram_png(name: str, num: dict[str, Any]) -> bytes:
    """Equal-width histogram of a numeric section, with the median marked."""
    hist = num["histogram"]
    edges, counts = hist["edges"], hist["counts"]
    fig = _figure(5.6, 2.8)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.89, bottom=0.11)
    ax = fig.add_subplot()
    widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)] or [1.0]
    if len(counts) == 1 and widths[0] == 0:
        widths = [max(abs(edges[0]) * 0.05, 0.5)]
        edges = [edges[0] - widths[0] / 2, edges[0] + widths[0] / 2]
    ax.bar(edges[:-1], counts, width=widths, align="edge", color=_BAR, edgecolor="white", linewidth=0.4)
    if num.get("median") is not None:
        ax.axvline(
            num["median"], color=_ACCENT, linestyle="--", linewidth=1.2, label=f"median {fmt(num['median'])}"
        )
        legend = ax.legend(fontsize=8, loc="best", framealpha=0.9, edgecolor="none")
        for text in legend.get_texts():  # Legend takes no Text kwargs: set them on its entries
            text.update(_PLAIN)
    note = "exact" if hist["exact"] else f"±{100 * hist['count_error']:.2g}% of n per bin"
    ax.set_title(f"{_label(name, 50)} — histogram ({note})", fontsize=9, loc="left", **_PLAIN)
    ax.set_ylabel("count", fontsize=8, **_PLAIN)
    _style(ax)
    return _png(fig)


def value_bars_png(name: str, num: dict[str, Any]) -> bytes:
    """One bar per distinct integer value (small-cardinality ints such as years or labels)."""
    vc = num["value_counts"]
    fig = _figure(5.6, 2.8)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.89, bottom=0.16)
    ax = fig.add_subplot()
    xs = range(len(vc))
    ax.bar(xs, [v["count"] for v in vc], color=_BAR, width=0.8)
    rotate = 45 if len(vc) > 12 or max(len(str(v["value"])) for v in vc) > 6 else 0
    ax.set_xticks(xs, [str(v["value"]) for v in vc], fontsize=7, rotation=rotate, **_PLAIN)
    ax.set_title(f"{_label(name, 50)} — one bar per value (exact)", fontsize=9, loc="left", **_PLAIN)
    ax.set_ylabel("count", fontsize=8, **_PLAIN)
    _style(ax)
    return _png(fig)


def time_histogram_png(name: str, section: dict[str, Any]) -> bytes:
    """Histogram of dates/timestamps on a date axis (UTC)."""
    import datetime as dt

    from matplotlib import dates as mdates

    hist = section["histogram"]
    epoch = dt.datetime(1970, 1, 1)
    edges = [mdates.date2num(epoch + dt.timedelta(seconds=e)) for e in hist["edges_epoch_s"]]
    widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
    if len(widths) == 1 and widths[0] == 0:
        widths, edges = [1.0], [edges[0] - 0.5, edges[0] + 0.5]
    fig = _figure(5.6, 2.8)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.89, bottom=0.2)
    ax = fig.add_subplot()
    ax.bar(
        edges[:-1], hist["counts"], width=widths, align="edge", color=_BAR, edgecolor="white", linewidth=0.4
    )
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    note = "exact" if hist["exact"] else f"±{100 * hist['count_error']:.2g}% of n per bin"
    ax.set_title(f"{_label(name, 50)} — time histogram, UTC ({note})", fontsize=9, loc="left", **_PLAIN)
    ax.set_ylabel("count", fontsize=8, **_PLAIN)
    _style(ax)
    return _png(fig)


def top_k_png(name: str, s: dict[str, Any]) -> bytes:
    """Horizontal bar chart of the most frequent strings, largest on top.

    With sketch counts only the values whose count is guaranteed above the sketch error are
    drawn, each with its [lower, upper] bounds as an error bar, so no bar claims a count the
    data may not have (a value seen once never shows as 2).
    """
    top = s["top"]
    if not s["top_exact"]:
        top = [t for t in top if t["lower"] > s["top_max_error"]] or top[:1]
    labels = [_label(t["value"], 28) or "(empty)" for t in reversed(top)]
    counts = [t["count"] for t in reversed(top)]
    height = max(1.4, 0.24 * len(top) + 0.8)
    fig = _figure(5.6, height)
    # fixed margins (cheaper than constrained layout): room for the longest label and the title
    left = min(0.45, 0.05 + 0.0115 * max(map(len, labels), default=1))
    fig.subplots_adjust(left=left, right=0.97, top=1 - 0.4 / height, bottom=0.35 / height)
    ax = fig.add_subplot()
    xerr = None
    if not s["top_exact"]:
        shown = list(reversed(top))
        xerr = [[t["count"] - t["lower"] for t in shown], [t["upper"] - t["count"] for t in shown]]
    ax.barh(range(len(top)), counts, color=_BAR, height=0.7, xerr=xerr, ecolor="#333333", capsize=2)
    ax.set_yticks(range(len(top)), labels, fontsize=7, **_PLAIN)
    note = "exact counts" if s["top_exact"] else f"counts ±{fmt(s['top_max_error'])}"
    if not s["top_exact"] and top and top[0]["lower"] <= s["top_max_error"]:
        note += "; no guaranteed heavy hitter"
    ax.set_title(f"{_label(name, 50)} — top {len(top)} values ({note})", fontsize=9, loc="left", **_PLAIN)
    _style(ax)
    return _png(fig)


def _label(text: str, limit: int) -> str:
    return _CONTROL.sub("\ufffd", shorten(text, limit))


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=_DPI)
    FigureCanvasAgg(fig)
    return fig


def _style(ax: Any) -> None:
    ax.tick_params(labelsize=7)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(axis="both", alpha=0.25, linewidth=0.5)
    ax.set_axisbelow(True)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()
