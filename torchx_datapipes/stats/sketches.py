"""Apache DataSketches helpers and the blob table that carries serialized sketches.

The sketch objects do not pickle; they travel as their own ``serialize()`` bytes, stored
beside a JSON header in :mod:`torchx_datapipes.stats.partial`'s binary format.
"""

from __future__ import annotations

from typing import Any

try:
    import datasketches as ds
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("the stats job needs Apache DataSketches: pip install 'torchx-datapipes[stats]'") from e

KllSketch = Any  # datasketches ships no type stubs
HllSketch = Any
FreqSketch = Any

# HLL_4 is the smallest serialized form (2**lg_k / 2 bytes) with the same accuracy as HLL_8.
_HLL_TYPE = ds.tgt_hll_type.HLL_4


class Blobs:
    """An append-only table of byte strings referenced by index from the JSON header."""

    def __init__(self, items: list[bytes] | None = None) -> None:
        self.items: list[bytes] = items if items is not None else []

    def put(self, data: bytes) -> int:
        self.items.append(bytes(data))
        return len(self.items) - 1

    def get(self, index: int) -> bytes:
        try:
            return self.items[index]
        except (IndexError, TypeError) as e:
            raise ValueError(f"corrupt stats partial: sketch blob {index!r} is missing") from e


def new_kll(k: int) -> KllSketch:
    return ds.kll_doubles_sketch(k)


def load_kll(data: bytes) -> KllSketch:
    return ds.kll_doubles_sketch.deserialize(data)


def new_hll(lg_k: int) -> HllSketch:
    return ds.hll_sketch(lg_k, _HLL_TYPE)


def load_hll(data: bytes) -> HllSketch:
    return ds.hll_sketch.deserialize(data)


def merge_hll(a: HllSketch, b: HllSketch, lg_k: int) -> HllSketch:
    """A new HLL sketch holding the union of ``a`` and ``b`` (HLL sketches merge via a union)."""
    union = ds.hll_union(lg_k)
    union.update(a)
    union.update(b)
    return union.get_result(_HLL_TYPE)


def new_freq(lg_map_size: int) -> FreqSketch:
    return ds.frequent_strings_sketch(lg_map_size)


def load_freq(data: bytes) -> FreqSketch:
    return ds.frequent_strings_sketch.deserialize(data)


def frequent_items(sketch: FreqSketch) -> list[tuple[str, int, int, int]]:
    """``(item, estimate, lower_bound, upper_bound)`` by decreasing estimate, no false negatives."""
    items = sketch.get_frequent_items(ds.frequent_items_error_type.NO_FALSE_NEGATIVES)
    return sorted(items, key=lambda t: (-t[1], t[0]))


def kll_rank_error(k: int, as_pmf: bool) -> float:
    """The a-priori normalized rank error (99% confidence) of a KLL sketch of size ``k``."""
    return float(ds.kll_doubles_sketch.get_normalized_rank_error(k, as_pmf))
