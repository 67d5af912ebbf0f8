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
- a field whose every value in the batch is missing is filled and masked all-False like a partly
  missing one when its type is known, so every batch of a column has the same type:
  ``Collate.for_output(OUT)`` takes the types from a Parquet output's schema, or from the value
  types a JSON Lines or WebDataset output's writers recorded (``field_types`` in its manifest): a
  float column gives a float64 tensor of ``NaN``, an int column int64 zeros, a bool column
  ``False``, a 0-d tensor column its dtype; ``Collate(dtypes={"age": torch.float64})`` gives them
  by hand. A field of known dtype is collated to that dtype in every batch (a JSON column of ints
  and floats is float64 even in a batch of ints only). A field of unknown type (strings, lists,
  or plain ``collate``, which knows no output) stays a list of ``None`` there, with an all-False
  mask;
- strings, bytes and other values stay lists, ``None`` included (as ``default_collate`` keeps
  strings). Dates, datetimes, times, durations and ``Decimal`` (which a CSV
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
from torchx_datapipes.formats.fieldtypes import scalar_kind
from torchx_datapipes.io import manifest_schema as ms

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
        dtypes: per-field dtype of a numeric or bool column, for a batch where every value is
            missing (then the values tell nothing); :meth:`for_output` reads them from an output.
    """

    null: Mapping[str, Any] = field(default_factory=dict)
    mask: bool = True
    dtypes: Mapping[str, torch.dtype] = field(default_factory=dict)

    @classmethod
    def for_output(
        cls,
        url: str,
        split: Optional[str] = None,
        *,
        storage_options: Optional[Mapping[str, Any]] = None,
        null: Optional[Mapping[str, Any]] = None,
        mask: bool = True,
    ) -> "Collate":
        """A ``Collate`` knowing the column types of the output at ``url`` (its Parquet schema).

        Parquet: from the schema; JSON Lines and WebDataset: from the value types their writers
        recorded in the manifest (``field_types``; an output written before they did has none, and a
        batch where a field is always missing keeps its list of ``None``: pass ``dtypes=``).
        """
        return cls(null=dict(null or {}), mask=mask, dtypes=_output_dtypes(url, split, storage_options))

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
            return self._typed(name, _collate(name, values))
        present_values = [v for v in values if v is not None]
        filler = _filler(present_values) if present_values else _typed_filler(self.dtypes.get(name))
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
        return self._typed(name, _collate(name, [filler if m else v for v, m in zip(values, missing)]))

    def _typed(self, name: str, collated: Any) -> Any:
        """``collated`` in the field's known dtype (a column of ints and floats: float64 in every batch)."""
        dtype = self.dtypes.get(name)
        if dtype is not None and isinstance(collated, torch.Tensor) and collated.dtype != dtype:
            return collated.to(dtype)
        return collated


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


def _typed_filler(dtype: Optional[torch.dtype]) -> Optional[torch.Tensor]:
    """The fill value of a field of known ``dtype`` missing from a whole batch (None: unknown)."""
    if dtype is None:
        return None
    fill = math.nan if dtype.is_floating_point or dtype.is_complex else 0
    return torch.full((), fill, dtype=dtype)  # 0-d: the batch stacks to shape (B,), as a partial one


def _output_dtypes(
    url: str, split: Optional[str] = None, storage_options: Optional[Mapping[str, Any]] = None
) -> Dict[str, torch.dtype]:
    """The dtype a batch of each scalar numeric or bool column of the output at ``url`` collates to.

    Parquet columns only (the first part's schema: the parts share one, ``parquet_schema`` in the
    manifest): a plain column is read as Python numbers, so floats give float64, ints int64, bools
    bool; a 0-d tensor column (``{"torchx_datapipes.tensor": "0d"}``) gives its own dtype. Other
    formats and columns (strings, tensors with a shape, ...) give nothing."""
    from torchx_datapipes.data._parts import load_parts, read_success
    from torchx_datapipes.io.partfiles import open_part

    fmt, parts = load_parts(url, split, storage_options)
    if fmt != "parquet":
        return _recorded_dtypes(read_success(url, storage_options).get(ms.FIELD_TYPES) or {})
    if not parts:
        return {}
    import pyarrow.parquet as pq

    with open_part(parts[0], storage_options, None) as fh:
        schema = pq.read_schema(fh)
    out: Dict[str, torch.dtype] = {}
    for column in schema:
        dtype = _arrow_dtype(column)
        if dtype is not None:
            out[column.name] = dtype
    return out


_KIND_DTYPES = {"float": torch.float64, "int": torch.int64, "bool": torch.bool}


def _recorded_dtypes(field_types: Mapping[str, Any]) -> Dict[str, torch.dtype]:
    """The dtype of each field whose recorded value types are numbers or bools (nulls aside)."""
    out: Dict[str, torch.dtype] = {}
    for name, types in field_types.items():
        kind = scalar_kind(types)
        if kind is not None:
            out[name] = _KIND_DTYPES[kind]
    return out


def _arrow_dtype(f: Any) -> Optional[torch.dtype]:
    import pyarrow as pa

    from torchx_datapipes.formats.parquet.types import is_0d_field

    t = f.type
    if not (pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)):
        return None
    if is_0d_field(f):
        return torch.from_numpy(np.empty(0, dtype=t.to_pandas_dtype())).dtype
    if pa.types.is_boolean(t):
        return torch.bool
    return torch.float64 if pa.types.is_floating(t) else torch.int64


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
