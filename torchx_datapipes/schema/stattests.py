"""Two-sample test p-values (no SciPy needed): Kolmogorov-Smirnov and chi-square.

- :func:`ks_pvalue`: the asymptotic two-sample KS p-value ``Q_KS(sqrt(n_eff) * D)`` with
  Stephens' small-sample correction, as ``scipy.stats.ks_2samp(method="asymp")`` uses.
- :func:`chi2_sf`: the chi-square survival function, the regularized upper incomplete gamma
  ``Q(df/2, x/2)`` by its series or continued fraction (Numerical Recipes, 6.2).
- :func:`chi2_test`: the chi-square test of homogeneity, after :func:`merge_rare` pools the
  categories whose expected count is below :data:`MIN_EXPECTED` (the test's large-sample
  approximation is invalid on sparse counts: a 190-value id seen once or twice per value "drifts" by
  chance; Cochran's rule of thumb, as ``scipy.stats.chi2_contingency``'s documentation warns).
- :func:`holm`: Holm's step-down adjustment of p-values for testing many fields at once (Holm, 1979,
  "A simple sequentially rejective multiple test procedure"): it keeps the probability of any false
  alarm among the fields at alpha, under any dependence between the tests.
"""

from __future__ import annotations

import math

MIN_EXPECTED = 5.0  # a category expected fewer times than this in a sample is pooled


def kolmogorov_sf(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution."""
    if lam <= 0:
        return 1.0
    if lam < 0.2:
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = (-1) ** (k - 1) * math.exp(-2.0 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
    return max(0.0, min(1.0, 2.0 * total))


def ks_pvalue(d: float, n: int, m: int) -> float:
    """p-value of a two-sample KS statistic ``d`` between samples of sizes ``n`` and ``m``."""
    if n <= 0 or m <= 0:
        return 1.0
    en = math.sqrt(n * m / (n + m))
    return kolmogorov_sf((en + 0.12 + 0.11 / en) * d)


def chi2_sf(x: float, df: int) -> float:
    """P(X > x) for a chi-square variable with ``df`` degrees of freedom."""
    if df <= 0:
        return 1.0
    if x <= 0:
        return 1.0
    return _gammaq(df / 2.0, x / 2.0)


def _gammaq(a: float, x: float) -> float:
    if x < a + 1.0:
        return 1.0 - _gser(a, x)
    return _gcf(a, x)


def _gser(a: float, x: float) -> float:
    ap, total = a, 1.0 / a
    delta = total
    for _ in range(1000):
        ap += 1.0
        delta *= x / ap
        total += delta
        if abs(delta) < abs(total) * 1e-15:
            break
    return total * math.exp(-x + a * math.log(x) - math.lgamma(a))


def _gcf(a: float, x: float) -> float:
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def rare_categories(a: list[float], b: list[float]) -> list[bool]:
    """Which categories have an expected count below :data:`MIN_EXPECTED` in the smaller sample."""
    na, nb = sum(a), sum(b)
    n = na + nb
    if n <= 0:
        return [False] * len(a)
    small = min(na, nb)
    return [small * (x + y) / n < MIN_EXPECTED for x, y in zip(a, b, strict=True)]


def merge_rare(a: list[float], b: list[float]) -> tuple[list[float], list[float]]:
    """The two count vectors with their rare categories (:func:`rare_categories`) pooled into one
    "other" category, last; unchanged when none is rare."""
    a, b = [float(x) for x in a], [float(y) for y in b]
    rare = rare_categories(a, b)
    if not any(rare):
        return a, b
    keep = [i for i, r in enumerate(rare) if not r]
    pool = [i for i, r in enumerate(rare) if r]
    return [a[i] for i in keep] + [sum(a[i] for i in pool)], [b[i] for i in keep] + [sum(b[i] for i in pool)]


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order: the i-th smallest times ``m - i + 1`` (i from 1),
    made non-decreasing in that order and capped at 1. A field drifts when its adjusted p is below
    alpha, which keeps the family-wise false-alarm rate at alpha over the ``m`` tests."""
    m = len(pvalues)
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def chi2_test(a: list[float], b: list[float]) -> float:
    """p-value of the chi-square test of homogeneity of two count vectors over the same categories,
    with the rare categories pooled first (:func:`merge_rare`); 1.0 when fewer than two remain."""
    a, b = merge_rare(a, b)
    na, nb = sum(a), sum(b)
    if na <= 0 or nb <= 0:
        return 1.0
    n = na + nb
    stat, df = 0.0, -1
    for x, y in zip(a, b, strict=True):
        col = x + y
        if col <= 0:
            continue
        df += 1
        for obs, row in ((x, na), (y, nb)):
            exp = row * col / n
            stat += (obs - exp) ** 2 / exp
    return chi2_sf(stat, df) if df > 0 else 1.0
