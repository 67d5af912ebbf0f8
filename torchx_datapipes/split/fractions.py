"""Named split fractions, parsed once at the boundary from ``train=0.8,val=0.1,test=0.1``.

All arithmetic that decides *counts* or *boundaries* is exact (integers over a common
denominator), never float: ``0.1 * 10`` style rounding noise must not decide which split gets
the leftover record, or two machines with different libm/BLAS could disagree.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

import numpy as np

__all__ = ["FORMAT", "Fractions", "largest_remainder", "parse_fractions"]

FORMAT = (
    "NAME=FRACTION[,NAME=FRACTION...]: names of letters, digits, '_' or '-' (unique), fractions in (0, 1]"
    " summing to 1, e.g. train=0.8,val=0.1,test=0.1"
)
SUM_TOLERANCE = 1e-9
#: hashes are mapped to [0, 1) through their top 53 bits, so boundaries live in [0, 2**53].
UNIT_BITS = 53
_NAME = re.compile(r"[A-Za-z0-9_-]+\Z")


@dataclass(frozen=True)
class Fractions:
    """Named split fractions in the order given; ``str()`` round-trips through :func:`parse_fractions`."""

    names: tuple[str, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        problem = _problem(self.names, self.values)
        if problem:
            raise ValueError(
                f"invalid fractions {list(zip(self.names, self.values, strict=False))}: {problem}."
                f" Expected {FORMAT}"
            )

    def __str__(self) -> str:
        return ",".join(f"{n}={v!r}" for n, v in zip(self.names, self.values, strict=False))

    def __len__(self) -> int:
        return len(self.names)

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.names, self.values, strict=False))

    @cached_property
    def weights(self) -> tuple[tuple[int, ...], int]:
        """Exact integer weights ``a_s`` and their total ``D``: split ``s`` gets ``a_s / D``.

        Each float is read back through its shortest ``repr`` (so ``0.1`` is exactly 1/10) and the
        weights are renormalised to sum to exactly 1, absorbing the allowed 1e-9 slack.
        """
        exact = [Fraction(repr(v)) for v in self.values]
        denom = math.lcm(*(f.denominator for f in exact))
        nums = tuple(int(f * denom) for f in exact)
        return nums, sum(nums)

    @cached_property
    def boundaries(self) -> np.ndarray:
        """The ``k - 1`` interior cumulative boundaries scaled to ``2**53`` (uint64, exact floors).

        The last boundary, ``2**53``, is implicit: every 53-bit value falls below it, so nothing
        falls off the end.
        """
        nums, total = self.weights
        cum = [sum(nums[: j + 1]) for j in range(len(nums) - 1)]
        return np.array([c * (1 << UNIT_BITS) // total for c in cum], dtype=np.uint64)

    @property
    def split_dtype(self) -> type[np.signedinteger]:
        """Smallest signed dtype holding a split id."""
        return np.int8 if len(self.names) <= 127 else np.int16


def parse_fractions(text: str) -> Fractions:
    """Parse ``train=0.8,val=0.1,test=0.1`` (any number of named splits) into :class:`Fractions`.

    Raises:
        ValueError: naming the raw string, what was parsed from it and the accepted format.
    """
    names: list[str] = []
    values: list[float] = []
    try:
        if not isinstance(text, str) or not text.strip():
            raise _Bad("empty")
        for item in text.split(","):
            name, sep, raw = item.partition("=")
            name, raw = name.strip(), raw.strip()
            if not sep:
                raise _Bad(f"{item.strip()!r} has no '='")
            try:
                value = float(raw)
            except ValueError:
                raise _Bad(f"{raw!r} (for {name!r}) is not a number") from None
            names.append(name)
            values.append(value)
        problem = _problem(tuple(names), tuple(values))
        if problem:
            raise _Bad(problem)
    except _Bad as e:
        raise ValueError(
            f"invalid fractions {text!r} (parsed as {list(zip(names, values, strict=False))}): {e}."
            f" Expected {FORMAT}"
        ) from None
    return Fractions(tuple(names), tuple(values))


def largest_remainder(n: int, fractions: Fractions) -> tuple[int, ...]:
    """Split ``n`` items into exact integer counts proportional to ``fractions``.

    Hamilton's largest-remainder method on exact rationals: every split first gets
    ``floor(f_s * n)``, then the leftover items go one each to the largest remainders, ties broken
    by split order (the earlier split wins). The counts always sum to ``n``.
    """
    if n < 0:
        raise ValueError(f"cannot split a negative number of records ({n})")
    nums, total = fractions.weights
    floors = [a * n // total for a in nums]
    rems = [a * n % total for a in nums]
    left = n - sum(floors)
    for s in sorted(range(len(nums)), key=lambda s: (-rems[s], s))[:left]:
        floors[s] += 1
    return tuple(floors)


class _Bad(Exception):
    pass


def _problem(names: tuple[str, ...], values: tuple[float, ...]) -> str | None:
    """Why ``names``/``values`` are not valid fractions, or ``None``."""
    if len(names) != len(values):
        return f"{len(names)} names but {len(values)} values"
    if not names:
        return "no splits given"
    for name, value in zip(names, values, strict=False):
        if not isinstance(name, str) or not _NAME.match(name):
            return f"split name {name!r} must be non-empty letters, digits, '_' or '-'"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"fraction {value!r} for {name!r} is not a finite number"
        if not 0.0 < value <= 1.0:
            return f"fraction {value!r} for {name!r} is outside (0, 1]"
    seen: dict[str, str] = {}
    for name in names:
        # case-insensitive: split names become directories, and macOS/Windows fold case
        if name.lower() in seen:
            return f"split name {name!r} is given twice (as {seen[name.lower()]!r} and {name!r})"
        seen[name.lower()] = name
    total = math.fsum(values)
    if abs(total - 1.0) > SUM_TOLERANCE:
        return f"fractions sum to {total!r}, not 1"
    return None
