"""Two-sample test p-values (no SciPy needed): Kolmogorov-Smirnov and chi-square.

- :func:`ks_pvalue`: the asymptotic two-sample KS p-value ``Q_KS(sqrt(n_eff) * D)`` with
  Stephens' small-sample correction, as ``scipy.stats.ks_2samp(method="asymp")`` uses.
- :func:`chi2_sf`: the chi-square survival function, the regularized upper incomplete gamma
  ``Q(df/2, x/2)`` by its series or continued fraction (Numerical Recipes, 6.2).
"""

from __future__ import annotations

import math


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


def chi2_test(a: list[float], b: list[float]) -> float:
    """p-value of the chi-square test of homogeneity of two count vectors over the same categories."""
    a, b = [float(x) for x in a], [float(y) for y in b]
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
