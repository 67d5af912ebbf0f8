"""Matplotlib charts rendered to PNG bytes with the Agg canvas.

We build ``matplotlib.figure.Figure`` objects directly instead of using pyplot: no global
figure registry, no backend switch for the caller's process, safe in worker threads.

Field names and values are data, never markup: every Text that can carry them is created with
``parse_math=False`` and ``usetex=False`` (:data:`_PLAIN`), so ``$\\foo$`` or ``$x^2$`` is drawn as
typed instead of being parsed as mathtext (which raised ``ValueError: Unknown symbol``) or sent
to LaTeX. Numeric tick labels keep matplotlib's own formatting (its offsets use mathtext).

A chart costs ~50-100 ms of matplotlib (artists, text layout, Agg, PNG), so a report of many
charts draws them with :func:`draw_all`: a share in this process and the rest in helper
interpreters (``python -c``, this module imported from the caller's ``sys.path``; jobs and PNGs
pickled over pipes), one per spare core. Plain subprocesses rather than ``multiprocessing``: a
spawned pool would re-import the caller's ``__main__`` (the runner, with torch) in every helper,
and fork is unsafe in a process that holds threads. A helper that fails is retried here, with a
warning.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import subprocess
import sys
import threading
import warnings
from typing import Any, Callable

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


# ---- many charts: (kind, label, section) jobs, drawn here and in helper interpreters -------------

ChartJob = tuple[str, str, dict[str, Any]]
"""One chart to draw: its kind (a key of :data:`DRAW`), its field label and its stats section."""

DRAW: dict[str, Callable[[str, dict[str, Any]], bytes]] = {
    "bars": value_bars_png,
    "hist": histogram_png,
    "time": time_histogram_png,
    "topk": top_k_png,
}
MIN_CHARTS_PER_HELPER = 24  # a helper costs ~1 s to start (matplotlib's import): ~16 charts' time
MAX_HELPERS = 3


def draw(job: ChartJob) -> bytes:
    """The PNG of one job."""
    kind, label, section = job
    return DRAW[kind](label, section)


def draw_all(jobs: list[ChartJob], helpers: int | None = None) -> list[bytes]:
    """The PNGs of ``jobs``, in order: equal shares drawn here and by ``helpers`` subprocesses.

    ``helpers`` defaults to the spare cores (at most :data:`MAX_HELPERS`), none for fewer than
    :data:`MIN_CHARTS_PER_HELPER` charts a helper (the 23 charts of a 30-column table are all
    drawn here). The PNGs are the same whoever draws them.
    """
    n = _helpers(len(jobs)) if helpers is None else helpers
    if n <= 0 or not jobs:
        return [draw(j) for j in jobs]
    shares = [jobs[i :: n + 1] for i in range(n + 1)]  # interleaved: similar mixes of chart kinds
    results: list[list[bytes] | None] = [None] * (n + 1)
    threads = [threading.Thread(target=_in_helper, args=(shares[i], results, i)) for i in range(1, n + 1)]
    for t in threads:
        t.start()
    results[0] = [draw(j) for j in shares[0]]
    for t in threads:
        t.join()
    out: list[bytes] = [b""] * len(jobs)
    for i, share in enumerate(shares):
        got = results[i]
        if got is None or len(got) != len(share):  # the helper failed (warned): draw its share here
            got = [draw(j) for j in share]
        out[i :: n + 1] = got
    return out


def _helpers(charts: int) -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 1, MAX_HELPERS, charts // MIN_CHARTS_PER_HELPER))


# the helper imports this module from the caller's own sys.path (a PYTHONPATH would go before the stdlib)
_BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); import {0}; {0}._helper_main()"
HELPER_S_PER_CHART = 5.0  # the helper's time limit: a minute, plus this per chart (~0.1 s each)


def _in_helper(share: list[ChartJob], results: list[list[bytes] | None], slot: int) -> None:
    """Draw ``share`` in a helper interpreter; its PNGs go to ``results[slot]`` (None if it failed)."""
    cmd = [sys.executable, "-c", _BOOT.format(__name__), json.dumps(sys.path)]
    try:
        proc = subprocess.run(
            cmd,
            input=pickle.dumps(share, protocol=5),
            capture_output=True,
            timeout=60 + HELPER_S_PER_CHART * len(share),
        )
        if proc.returncode != 0:
            raise OSError(f"exit code {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
        results[slot] = pickle.loads(proc.stdout)  # our own helper's output
    except (OSError, subprocess.TimeoutExpired, pickle.UnpicklingError, EOFError) as e:
        warnings.warn(
            f"a helper process drawing {len(share)} report charts failed ({e}); drawing them in this"
            f" process instead (slower). If it persists, check that `{sys.executable} -c 'import {__name__}'`"
            " works in this environment",
            stacklevel=2,
        )


def _helper_main() -> None:
    """A helper: pickled jobs on stdin, their pickled PNGs on stdout."""
    jobs: list[ChartJob] = pickle.load(sys.stdin.buffer)  # from our own parent process
    sys.stdout.buffer.write(pickle.dumps([draw(j) for j in jobs], protocol=5))
    sys.stdout.flush()
