"""Batches of records with missing values: a ``collate_fn`` for real tables.

PyTorch's ``default_collate`` fails on the first ``None`` it meets, naming no field
(``TypeError: must be real number, not NoneType``), and every real table has missing values.
:class:`Collate` collates dict records field by field, as ``default_collate`` does, and handles
``None`` per field:

- ``null={"age": -1.0}``: a fill value for a field's missing values;
- otherwise, with ``mask=True`` (the default), numbers, bools and tensors of one shape are filled
  (``NaN`` for floating point, so a forgotten mask shows up in the loss; ``0``/``False`` for
  integers and bools) and the batch gets ``batch["__mask__"][field]``, a bool tensor that is True
  where the value was present. Only fields with a missing value in this batch have one:
  :func:`present` gives the mask of any field (all True when nothing was missing);
- strings, bytes and other values stay lists, ``None`` included (as ``default_collate`` keeps
  strings); so does a field missing from every record of the batch (its type is unknown there),
  with an all-False mask. Dates, datetimes, times, durations and ``Decimal`` (which a CSV
  ``--schema``, Parquet or our JSON Lines tags give back as such) stay lists too, where
  ``default_collate`` raises on them;
- with ``mask=False``, a missing value of a field without a fill value is a :class:`CollateError`
  naming the field, how many values were missing, and the two fixes.

A record without the field counts as missing. Records that are not dicts go to
``default_collate`` unchanged. ``Collate`` objects pickle (DataLoader workers get a copy).
"""

import datetime
import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import default_collate

from torchx_datapipes.errors import DatapipesError

MASK_KEY = "__mask__"
# values default_collate refuses that a table holds: kept as lists, like strings
_KEPT_AS_LISTS = (datetime.date, datetime.time, datetime.timedelta, Decimal)

__all__ = ["MASK_KEY", "Collate", "CollateError", "collate", "present"]


class CollateError(DatapipesError, TypeError):
    """A field of a batch cannot be collated: the message names it and the fix."""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.number, np.bool_)) and not isinstance(v, (str, bytes))


def _as_tensor(v: Any) -> Optional[torch.Tensor]:
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, np.ndarray) and v.dtype.kind in "biufc":
        return torch.from_numpy(v)
    return None


@dataclass(frozen=True)
class Collate:
    """A ``DataLoader`` ``collate_fn`` that handles ``None`` (see the module docstring).

    Args:
        null: per-field fill values for missing values (used before any mask).
        mask: fill numbers and tensors and report where values were missing in
            ``batch["__mask__"]``; False: a missing value without a fill value is an error.
    """

    null: Mapping[str, Any] = field(default_factory=dict)
    mask: bool = True

    def __call__(self, batch: Sequence[Any]) -> Any:
        if not batch or not all(isinstance(r, Mapping) for r in batch):
            return default_collate(list(batch))
        names: Dict[str, None] = {}
        for r in batch:
            names.update(dict.fromkeys(r))
        out: Dict[str, Any] = {}
        masks: Dict[str, torch.Tensor] = {}
        for name in names:
            values = [r.get(name) for r in batch]
            out[name] = self._field(name, values, masks)
        if masks:
            if MASK_KEY in out:
                raise CollateError(
                    f"records have a field named {MASK_KEY!r}, which Collate reserves for masks"
                )
            out[MASK_KEY] = masks
        return out

    def _field(self, name: str, values: List[Any], masks: Dict[str, torch.Tensor]) -> Any:
        missing = [v is None for v in values]
        if any(missing) and name in self.null:
            values = [self.null[name] if m else v for v, m in zip(values, missing)]
            missing = [False] * len(values)
        if not any(missing):
            return _collate(name, values)
        present_values = [v for v in values if v is not None]
        filler = _filler(present_values)
        if filler is None:  # strings, bytes, dicts, or nothing present: a list, None kept
            if not present_values and self.mask:
                masks[name] = torch.zeros(len(values), dtype=torch.bool)
            return values
        if not self.mask:
            raise CollateError(
                f"field {name!r}: {sum(missing)} of {len(values)} values in the batch are missing (None);"
                f" pass Collate(null={{{name!r}: <fill value>}}) to fill them, or Collate(mask=True) to"
                f" fill them and get batch[{MASK_KEY!r}][{name!r}]"
            )
        masks[name] = torch.tensor([not m for m in missing], dtype=torch.bool)
        return _collate(name, [filler if m else v for v, m in zip(values, missing)])


def _filler(present_values: List[Any]) -> Any:
    """The fill value for a field's missing values, or None when the field is not numeric."""
    if not present_values:
        return None
    first = present_values[0]
    t = _as_tensor(first)
    if t is not None:
        fill = math.nan if t.is_floating_point() or t.is_complex() else 0
        return torch.full_like(t, fill)
    if not all(_is_number(v) for v in present_values):
        return None
    if any(isinstance(v, (float, np.floating)) for v in present_values):
        return math.nan
    if all(isinstance(v, (bool, np.bool_)) for v in present_values):
        return False
    return 0


def _collate(name: str, values: List[Any]) -> Any:
    if all(isinstance(v, _KEPT_AS_LISTS) for v in values):
        return list(values)
    try:
        return default_collate(values)
    except (TypeError, RuntimeError) as e:
        raise CollateError(
            f"field {name!r}: cannot be collated ({e}); give the DataLoader a collate_fn for it, or"
            " select fields with OutputDataset(columns=[...])"
        ) from e


collate = Collate()
"""``Collate()``: missing numbers and tensors filled and masked, other missing values kept as None."""


def present(batch: Mapping[str, Any], name: str) -> torch.Tensor:
    """Where ``batch[name]`` holds a real value: its mask, or all True when nothing was missing."""
    masks = batch.get(MASK_KEY, {})
    if name in masks:
        return masks[name]
    value = batch[name]
    n = len(value) if not isinstance(value, torch.Tensor) else value.shape[0]
    if not isinstance(value, torch.Tensor):
        return torch.tensor([v is not None for v in value], dtype=torch.bool)
    return torch.ones(n, dtype=torch.bool)
