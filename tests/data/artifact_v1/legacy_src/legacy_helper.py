"""Helper module of the legacy transform (shipped with it, never installed)."""

OFFSET = 100


def shift(x: int) -> int:
    return x + OFFSET
