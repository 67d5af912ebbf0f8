"""Tensor/array accumulator: dtype and shape distributions plus element statistics.

numpy arrays and torch tensors (any device, dtype, shape or stride) are profiled by their
dtype, their shape (exact counts while a field has at most ``exact_distinct_limit`` distinct
shapes), their element count, and a :class:`NumericAcc` over every element as float64 (bools
as 0/1). Elements that are not real numbers (complex, strings, objects) are counted in
``non_numeric_elements`` and left out of the element statistics. torch is never imported
here: a tensor is recognised by its class, and converted with ``.detach().cpu()``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from torchx_datapipes.stats import sketches
from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.numeric import NumericAcc

_REAL_KINDS = "biuf"


def shape_key(shape: tuple[int, ...]) -> str:
    """``"3x64x64"``; ``""`` for a 0-d value."""
    return "x".join(map(str, shape))


def _shape_of_key(key: str) -> list[int]:
    return [int(s) for s in key.split("x")] if key else []


class ShapeCounter:
    """Exact shape counts while small; past the limit only the overflow is counted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: Counter[str] = Counter()
        self.overflow = 0  # values whose shape was not tracked (distinct shapes beyond the limit)

    def add(self, keys: list[str]) -> None:
        for key, n in Counter(keys).items():
            if key in self.counts or len(self.counts) < self.limit:
                self.counts[key] += n
            else:
                self.overflow += n

    def merge(self, other: ShapeCounter) -> None:
        self.overflow += other.overflow
        for key in sorted(other.counts):  # past the limit, which shapes are kept depends on order
            if key in self.counts or len(self.counts) < self.limit:
                self.counts[key] += other.counts[key]
            else:
                self.overflow += other.counts[key]

    def state(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "overflow": self.overflow}

    @staticmethod
    def from_state(d: dict[str, Any], limit: int) -> ShapeCounter:
        sc = ShapeCounter(limit)
        sc.counts = Counter({str(k): int(v) for k, v in d["counts"].items()})
        sc.overflow = int(d["overflow"])
        return sc

    def result(self, top_k: int) -> dict[str, Any]:
        ranked = sorted(self.counts.items(), key=lambda t: (-t[1], t[0]))
        ndim: Counter[int] = Counter()
        for key, n in self.counts.items():
            ndim[len(_shape_of_key(key))] += n
        return {
            "shapes": [{"shape": _shape_of_key(k), "count": n} for k, n in ranked[:top_k]],
            "distinct_shapes": len(self.counts) if self.overflow == 0 else None,
            "shapes_exact": self.overflow == 0,
            "untracked_shapes": self.overflow,
            "ndim": {str(k): ndim[k] for k in sorted(ndim)},
        }


def to_numpy(v: Any) -> tuple[np.ndarray, str, str]:
    """``(array, dtype name, library)`` for a numpy array or a torch tensor."""
    if isinstance(v, np.ndarray):
        return v, str(v.dtype), "numpy"
    t = v.detach()
    dtype = str(t.dtype).removeprefix("torch.")
    if not t.is_floating_point() or t.element_size() >= 4 or dtype == "float16":
        try:
            return t.cpu().numpy(), dtype, "torch"
        except (TypeError, RuntimeError):
            pass
    return t.cpu().double().numpy(), dtype, "torch"  # bfloat16/float8: no numpy dtype


class TensorAcc:
    """Statistics of the numpy arrays and torch tensors of one field."""

    def __init__(self, config: StatsConfig) -> None:
        self.config = config
        self.count = 0
        self.dtypes: Counter[str] = Counter()
        self.libraries: Counter[str] = Counter()
        self.shapes = ShapeCounter(config.exact_distinct_limit)
        self.numel = NumericAcc(config)
        self.elements = NumericAcc(config)
        self.non_numeric = 0

    def update(self, values: list[Any]) -> None:
        if not values:
            return
        self.count += len(values)
        keys, sizes, flat = [], [], []
        for v in values:
            arr, dtype, lib = to_numpy(v)
            self.dtypes[dtype] += 1
            self.libraries[lib] += 1
            keys.append(shape_key(tuple(arr.shape)))
            sizes.append(arr.size)
            if arr.dtype.kind in _REAL_KINDS:
                flat.append(arr.astype(np.float64, copy=False).reshape(-1))
            else:
                self.non_numeric += int(arr.size)
        self.shapes.add(keys)
        self.numel.update(np.asarray(sizes, dtype=np.float64))
        if flat:
            self.elements.update(np.concatenate(flat) if len(flat) > 1 else flat[0])

    def merge(self, other: TensorAcc) -> None:
        self.count += other.count
        self.dtypes.update(other.dtypes)
        self.libraries.update(other.libraries)
        self.shapes.merge(other.shapes)
        self.numel.merge(other.numel)
        self.elements.merge(other.elements)
        self.non_numeric += other.non_numeric

    def state(self, blobs: sketches.Blobs) -> dict[str, Any]:
        return {
            "count": self.count,
            "dtypes": dict(self.dtypes),
            "libraries": dict(self.libraries),
            "shapes": self.shapes.state(),
            "numel": self.numel.state(blobs),
            "elements": self.elements.state(blobs),
            "non_numeric": self.non_numeric,
        }

    @staticmethod
    def from_state(d: dict[str, Any], blobs: sketches.Blobs, config: StatsConfig) -> TensorAcc:
        acc = TensorAcc(config)
        acc.count = int(d["count"])
        acc.dtypes = Counter({str(k): int(v) for k, v in d["dtypes"].items()})
        acc.libraries = Counter({str(k): int(v) for k, v in d["libraries"].items()})
        acc.shapes = ShapeCounter.from_state(d["shapes"], config.exact_distinct_limit)
        acc.numel = NumericAcc.from_state(d["numel"], blobs, config)
        acc.elements = NumericAcc.from_state(d["elements"], blobs, config)
        acc.non_numeric = int(d["non_numeric"])
        return acc

    def result(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "dtypes": dict(sorted(self.dtypes.items(), key=lambda t: (-t[1], t[0]))),
            "libraries": dict(sorted(self.libraries.items())),
            **self.shapes.result(self.config.top_k),
            "numel": self.numel.result(),
            "elements": self.elements.result() if self.elements.count else None,
            "non_numeric_elements": self.non_numeric,
        }
