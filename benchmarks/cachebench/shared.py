"""What every part of the cache benchmark shares: the run's sizes (and the two presets), units,
the ``#``-prefixed progress lines, markdown tables, and removing what a run stored in a cache.
Nothing here imports torch, so the spawned numpy workers of part 2 stay torch-free.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchx_datapipes.cache import Cache

MB = 1e6
QUICK_NOTE = " (--quick: smaller sizes than the issue's, not a verdict)"


@dataclass(frozen=True)
class Sizes:
    small_keys: int
    small_value: int
    small_batch: int
    tensor_keys: int
    tensor_elems: int
    tensor_batch: int
    ws_items: int
    ws_elems: int
    ws_batch: int
    passes: int


# scripts/services.sh starts memcached with -m 1024, so 100k 1 KiB values, 128 1 MiB values and
# the 200 MiB working set fit (with -m 256 the parts evicted each other: the benchmark measuring itself).
FULL = Sizes(100_000, 1024, 1000, 128, 262_144, 16, 800, 65_536, 16, 2)
QUICK = Sizes(10_000, 1024, 1000, 32, 262_144, 16, 200, 65_536, 16, 2)


_T0 = time.perf_counter()


def progress(msg: str) -> None:
    """A progress line (stdout, ``#``-prefixed) with the seconds since start."""
    print(f"# [{time.perf_counter() - _T0:5.1f}s] {msg}", flush=True)


def batched(keys: Sequence[int], size: int) -> list[list[int]]:
    return [list(keys[i : i + size]) for i in range(0, len(keys), size)]


def cleanup(cache: Cache, keys: Sequence[int]) -> None:
    """Remove what this run stored (memcached's clear() only invalidates, so delete first)."""
    if cache.scheme == "memcached":
        for b in batched(keys, 1000):
            cache.delete_many(b)
    cache.clear()
    cache.close()


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
