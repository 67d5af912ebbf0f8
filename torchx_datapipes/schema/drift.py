"""Distances between one field's distributions in two stats outputs, and whether it drifted.

- Categorical (strings with ``values``, small-cardinality integers, booleans): L∞ over
  normalized frequencies (TFDV's ``infinity_norm``), Jensen-Shannon and PSI over the same
  categories; a sketch-only string field uses its top values plus an "other" bucket.
- Numeric: aligned histograms from the two KLL sketches (:data:`BINS` equal-mass bins of the
  baseline, both CDFs read at the same edges): Jensen-Shannon divergence (log2), PSI,
  normalized Wasserstein (W1 / baseline std) and the KS statistic.

Every distance comes with ``error``: a first-order bound from the sketches' rank errors (0 when
both sketches are exact). The decision is sample-size aware (:func:`decide`), as evidently does:
with at most :data:`SMALL_N` values on either side a test decides (KS for numbers, chi-square for
categories, drift when p < :data:`P_VALUE`); above it a distance does (JS divergence >
:data:`JS_THRESHOLD` for numbers, L∞ > :data:`LINF_THRESHOLD` for categories).

Testing many fields at once, :func:`correct` adjusts the tests' p-values with Holm's method across
the fields of one comparison: 17 fields tested at 0.05 would otherwise flag one on most comparisons
of two random halves of one table. The chi-square test pools categories expected fewer than 5 times
(``stattests.merge_rare``); a field with more than :data:`SPARSE_SHARE` of its values in such rare
categories (an id such as a 190-value ``Individual ID`` over 344 rows) has nothing meaningful left to
test: it is reported as sparse (id-like), not checked, unless it holds integers, which are then
compared as numbers (KS).
"""

from __future__ import annotations

import base64
import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchx_datapipes.schema.stattests import chi2_test, holm, ks_pvalue, rare_categories
from torchx_datapipes.stats import sketches

SMALL_N = 1000
P_VALUE = 0.05
JS_THRESHOLD = 0.01  # JS divergence, log2; = a JS distance of 0.1 (evidently's default)
LINF_THRESHOLD = 0.1
BINS = 10
SPARSE_SHARE = 0.5  # above this share of its values in rare (or unknown) categories: no chi-square test
SPARSE_NOTE = (
    "sparse (id-like): most values are in categories too rare for a chi-square test (expected fewer than"
    " 5 times per side; an id seen once or twice per value); not tested"
)
OTHER = "\0other"  # the bucket of a sketch-only string field's values beyond its top values
_EPS = 1e-4  # PSI/JS floor for empty bins
THRESHOLDS = {"js": JS_THRESHOLD, "linf": LINF_THRESHOLD, "psi": 0.2, "wasserstein": 0.1, "ks": P_VALUE,
              "chi2": P_VALUE}  # fmt: skip


@dataclass
class Drift:
    """One field's comparison: every distance, its error, the method that decided and the verdict."""

    field: str
    kind: str  # numeric | categorical | none
    n_a: int
    n_b: int
    distances: dict[str, float | None] = dataclasses.field(default_factory=dict)
    errors: dict[str, float] = dataclasses.field(default_factory=dict)
    method: str = ""
    value: float | None = None
    threshold: float | None = None
    drifted: bool = False
    checked: bool = True
    note: str = ""
    hist: dict[str, Any] | None = None  # aligned bins for the report: edges/labels, p, q
    correction: str = ""  # "holm": ``value`` is the p-value adjusted over ``tests`` fields (see correct)
    tests: int = 0  # how many fields' p-values were adjusted together

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_field(name: str, a: dict[str, Any], b: dict[str, Any]) -> Drift:
    """Distances between field entries ``a`` (baseline) and ``b`` (current) of two ``stats.json``."""
    ca, cb = _categories(a), _categories(b)
    na, nb = (a.get("numeric") or {}), (b.get("numeric") or {})
    numbers = bool(na.get("sketch") and nb.get("sketch"))
    if ca is not None and cb is not None:
        d = _categorical(name, ca, cb)
        if d.note != SPARSE_NOTE or not numbers:
            return d
        # integers too sparse per value for a chi-square test (e.g. 180..230 mm over 150 rows): their
        # order still tells, so they are compared as numbers (KS), as a wider integer range would be
    if numbers:
        return _numeric(name, na, nb)
    return Drift(name, "none", int(a.get("count", 0)), int(b.get("count", 0)), checked=False,
                 note="no comparable distribution (types differ or no values)")  # fmt: skip


def decide(d: Drift, method: str = "auto", threshold: float | None = None) -> Drift:
    """Set ``d.method``, ``d.value``, ``d.threshold`` and ``d.drifted`` (see the module docstring)."""
    if d.kind == "none" or not d.checked:
        return d
    if method == "auto":
        small = min(d.n_a, d.n_b) <= SMALL_N
        method = (
            ("ks" if d.kind == "numeric" else "chi2") if small else ("js" if d.kind == "numeric" else "linf")
        )
    value = d.distances.get(f"{method}_p" if method in ("ks", "chi2") else method)
    if value is None:
        d.checked, d.note = False, d.note or f"{method} is not available for a {d.kind} field"
        return d
    if d.note == SPARSE_NOTE:
        d.note = ""  # a distance decides: a sparse field's chi-square test is not used
    d.method, d.value = method, float(value)
    d.threshold = THRESHOLDS[method] if threshold is None else threshold
    d.drifted = bool(value < d.threshold if method in ("ks", "chi2") else value > d.threshold)
    return d


def correct(drifts: list[Drift]) -> list[Drift]:
    """Holm-adjust the p-values of the fields a test decided (``ks``, ``chi2``), together: each such
    field's ``value`` becomes its adjusted p (its raw p stays in ``distances``), ``drifted`` is
    adjusted p < its threshold, ``correction`` is ``"holm"`` and ``tests`` the number of fields."""
    tested = [d for d in drifts if d.checked and d.method in ("ks", "chi2") and d.value is not None]
    for d, p in zip(tested, holm([float(d.value or 0.0) for d in tested]), strict=True):
        assert d.threshold is not None
        d.value, d.correction, d.tests = p, "holm", len(tested)
        d.drifted = bool(p < d.threshold)
    return drifts


# -- categorical ---------------------------------------------------------------------------------
def _categories(f: dict[str, Any]) -> tuple[dict[str, float], float, int] | None:
    """``(counts by category, count error, total)`` of a categorical field, else None."""
    kinds = {k for k in f.get("types", {}) if k != "null"}
    s, num, b = f.get("string") or {}, f.get("numeric") or {}, f.get("bool")
    if kinds == {"string"} and s:
        if s.get("values") is not None:
            return {v["value"]: float(v["count"]) for v in s["values"]}, 0.0, int(s["count"])
        top = {t["value"]: float(t["lower"]) for t in s["top"] if t["lower"] > s["top_max_error"]}
        other = s["count"] - sum(top.values())
        return {**top, OTHER: float(other)}, float(s["top_max_error"]), int(s["count"])
    if kinds == {"bool"} and b:
        return {"true": float(b["true"]), "false": float(b["false"])}, 0.0, int(b["true"] + b["false"])
    if kinds <= {"int", "float"} and num.get("value_counts") and not num.get("nan") and num.get("finite"):
        return {str(v["value"]): float(v["count"]) for v in num["value_counts"]}, 0.0, int(num["finite"])
    return None


def _categorical(
    name: str, a: tuple[dict[str, float], float, int], b: tuple[dict[str, float], float, int]
) -> Drift:
    (ca, ea, na), (cb, eb, nb) = a, b
    keys = sorted(set(ca) | set(cb))
    x = np.array([ca.get(k, 0.0) for k in keys])
    y = np.array([cb.get(k, 0.0) for k in keys])
    d = Drift(name, "categorical", na, nb)
    if na == 0 or nb == 0:
        d.checked, d.note = False, "no values on one side"
        return d
    p, q = x / na, y / nb
    err = ea / na + eb / nb
    tx, ty, rare_share = _chi2_counts(ca, cb, na, nb)
    sparse = rare_share > SPARSE_SHARE
    d.distances = {"linf": float(np.max(np.abs(p - q))), "js": _js(p, q), "psi": _psi(p, q),
                   "chi2_p": chi2_test(tx, ty) if not err and not sparse else None}  # fmt: skip
    if sparse and not err:
        d.note = SPARSE_NOTE
    d.errors = {"linf": err, "js": err, "psi": err * len(keys)}
    shown = keys[:40]
    d.hist = {"labels": ["(other)" if k == OTHER else k for k in shown],
              "p": p[: len(shown)].tolist(), "q": q[: len(shown)].tolist()}  # fmt: skip
    return d


def _chi2_counts(
    ca: dict[str, float], cb: dict[str, float], na: int, nb: int
) -> tuple[list[float], list[float], float]:
    """The two count vectors the chi-square test compares, and the share of the values in categories
    too rare for it (pooled by the test) or unknown (the "other" of a sketch-only field).

    The categories are one partition of both sides: when either side lists only its top values, the
    values listed on both sides, plus everything else as "other" on each side (a value in one side's
    top only would otherwise count 0 on the other side, where it is in "other")."""
    if OTHER in ca or OTHER in cb:
        common = sorted((set(ca) & set(cb)) - {OTHER})
        x = [ca[k] for k in common] + [max(0.0, na - sum(ca[k] for k in common))]
        y = [cb[k] for k in common] + [max(0.0, nb - sum(cb[k] for k in common))]
        listed, unknown = len(common), x[-1] + y[-1]
    else:
        keys = sorted(set(ca) | set(cb))
        x, y = [ca.get(k, 0.0) for k in keys], [cb.get(k, 0.0) for k in keys]
        listed, unknown = len(keys), 0.0
    rare = rare_categories(x, y)
    rare_mass = unknown + sum(x[i] + y[i] for i in range(listed) if rare[i])
    return x, y, rare_mass / max(1.0, float(na + nb))


# -- numeric ---------------------------------------------------------------------------------------
def _numeric(name: str, a: dict[str, Any], b: dict[str, Any]) -> Drift:
    ka, kb = (sketches.load_kll(base64.b64decode(x["sketch"])) for x in (a, b))
    na, nb = int(ka.n), int(kb.n)
    d = Drift(name, "numeric", na, nb)
    ea = 0.0 if not ka.is_estimation_mode() else float(ka.normalized_rank_error(False))
    eb = 0.0 if not kb.is_estimation_mode() else float(kb.normalized_rank_error(False))
    inner = sorted(set(float(v) for v in ka.get_quantiles([i / BINS for i in range(1, BINS)])))
    inner = [e for e in inner if a["min"] <= e < a["max"]] or [float(a["min"])]
    p = _masses(ka, inner)
    q = _masses(kb, inner)
    # the KS statistic: the largest CDF gap, at every retained value of either sketch
    pts = np.unique(np.concatenate([_items(ka), _items(kb)]))
    fa, fb = np.asarray(ka.get_cdf(pts.tolist()))[:-1], np.asarray(kb.get_cdf(pts.tolist()))[:-1]
    ks = float(np.max(np.abs(fa - fb))) if pts.size else 0.0
    std = a.get("std_pop") or 0.0
    span = max(float(b["max"]), float(a["max"])) - min(float(b["min"]), float(a["min"]))
    w1 = float(np.sum(np.abs(fa - fb)[:-1] * np.diff(pts))) if pts.size > 1 else 0.0
    wn = w1 / std if std > 0 else (0.0 if w1 == 0 else math.inf)
    delta_a, delta_b = 2 * ea, 2 * eb  # each bin's mass error: two CDF reads
    d.distances = {"js": _js(p, q), "psi": _psi(p, q), "wasserstein": wn, "ks": ks,
                   "ks_p": ks_pvalue(ks, na, nb), "linf": float(np.max(np.abs(p - q)))}  # fmt: skip
    d.errors = {
        "js": _js_error(p, q, delta_a, delta_b),
        "psi": _psi_error(p, q, delta_a, delta_b),
        "wasserstein": (ea + eb) * span / std if std > 0 else 0.0,
        "ks": ea + eb,
        "linf": delta_a + delta_b,
    }
    edges = [float(min(a["min"], b["min"])), *inner, float(max(a["max"], b["max"]))]
    d.hist = {"edges": edges, "p": p.tolist(), "q": q.tolist()}
    return d


def _items(k: Any) -> Any:
    return np.fromiter((v for v, _ in k), dtype=np.float64)


def _masses(k: Any, inner: list[float]) -> Any:
    """Masses of the bins ``(-inf, e1], (e1, e2], ..., (ek, inf)`` from a sketch's CDF."""
    cdf = np.asarray(k.get_cdf(inner, True), dtype=np.float64)
    return np.clip(np.diff(np.concatenate([[0.0], cdf])), 0.0, 1.0)


def _js(p: Any, q: Any) -> float:
    m = (p + q) / 2
    return float(0.5 * _kl(p, m) + 0.5 * _kl(q, m))


def _kl(p: Any, m: Any) -> float:
    mask = p > 0
    return float(np.sum(p[mask] * np.log2(p[mask] / m[mask])))


def _psi(p: Any, q: Any) -> float:
    pp, qq = np.maximum(p, _EPS), np.maximum(q, _EPS)
    return float(np.sum((qq - pp) * np.log(qq / pp)))


def _js_error(p: Any, q: Any, da: float, db: float) -> float:
    """First order: |dJS/dp_i| = |log2(p_i/m_i)| / 2 per unit of mass moved in bin i."""
    if not da and not db:
        return 0.0
    m = np.maximum((p + q) / 2, _EPS)
    gp = np.abs(np.log2(np.maximum(p, _EPS) / m)) / 2
    gq = np.abs(np.log2(np.maximum(q, _EPS) / m)) / 2
    return float(np.sum(gp) * da + np.sum(gq) * db)


def _psi_error(p: Any, q: Any, da: float, db: float) -> float:
    if not da and not db:
        return 0.0
    pp, qq = np.maximum(p, _EPS), np.maximum(q, _EPS)
    gp = np.abs(-np.log(qq / pp) - (qq - pp) / pp)
    gq = np.abs(np.log(qq / pp) + (qq - pp) / qq)
    return float(np.sum(gp) * da + np.sum(gq) * db)
