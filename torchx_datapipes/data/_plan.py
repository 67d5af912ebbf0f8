"""Plans (sorted lists of half-open intervals of epoch positions) and who serves which part.

A plan of length R is served in plan-index order. Ranks take contiguous spans of it, and
DataLoader workers contiguous sub-spans of their rank's span, so the set a rank gets depends
on the plan and the world size only. ``even`` makes the spans equal: "drop" cuts the plan to a
multiple of the world size, "pad" extends it by repeating its first indices (plan index
``i >= R`` serves plan index ``(i - R) % R``).
"""

from typing import List, Sequence, Tuple

Interval = Tuple[int, int]
EVEN_MODES = ("none", "pad", "drop")


def plan_len(plan: Sequence[Interval]) -> int:
    return sum(b - a for a, b in plan)


def plan_slice(plan: Sequence[Interval], i: int, j: int) -> List[Interval]:
    """The positions at plan indices ``[i, j)``."""
    out: List[Interval] = []
    offset = 0
    for a, b in plan:
        n = b - a
        lo, hi = max(i - offset, 0), min(j - offset, n)
        if lo < hi:
            out.append((a + lo, a + hi))
        offset += n
        if offset >= j:
            break
    return out


def normalize(intervals: Sequence[Interval]) -> List[Interval]:
    """Sorted, merged, non-empty intervals."""
    out: List[Interval] = []
    for a, b in sorted((int(a), int(b)) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def complement(covered: Sequence[Interval], n: int) -> List[Interval]:
    """``[0, n)`` minus ``covered``."""
    out: List[Interval] = []
    start = 0
    for a, b in normalize(covered):
        if a > start:
            out.append((start, min(a, n)))
        start = max(start, b)
    if start < n:
        out.append((start, n))
    return out


def served_len(r: int, world: int, even: str) -> int:
    """The length of the (cut or extended) plan the ranks share."""
    if even == "drop":
        return (r // world) * world
    if even == "pad":
        return -(-r // world) * world if r else 0
    return r


def split_span(start: int, n: int, parts: int, k: int) -> Interval:
    """Part ``k`` of ``parts`` contiguous parts of ``[start, start + n)`` (the first ``n % parts`` longer)."""
    q, rem = divmod(n, parts)
    a = start + k * q + min(k, rem)
    return a, a + q + (k < rem)


def rank_span(r: int, world: int, rank: int, even: str) -> Interval:
    return split_span(0, served_len(r, world, even), world, rank)


def pieces(plan: Sequence[Interval], s: int, e: int) -> List[Tuple[int, int, bool]]:
    """Position intervals ``(a, b, is_pad)`` served at (extended) plan indices ``[s, e)``."""
    r = plan_len(plan)
    out = [(a, b, False) for a, b in plan_slice(plan, s, min(e, r))]
    cur = max(s, r)
    while cur < e:
        j = (cur - r) % r
        take = min(e - cur, r - j)
        out.extend((a, b, True) for a, b in plan_slice(plan, j, j + take))
        cur += take
    return out
