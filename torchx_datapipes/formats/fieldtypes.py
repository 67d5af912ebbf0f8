"""The value types of each field of a part whose format has no schema (JSON Lines, WebDataset).

Parquet parts carry their column types; a JSON Lines or WebDataset part does not, so a reader that
meets a batch where a float field is always null cannot tell it from a string field. The writer of
such a part records, per field, the set of value types it wrote (``{"x": ["float", "null"]}``), the
unit's commit record keeps them (``field_types``, under the part's name) and the job's manifest
holds their union (``field_types``): ``Collate.for_output`` reads it, so every batch of a column
collates to the same type. Cost: one set of types per field and batch, ~0.1 us a value.

Type names: ``null``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``dict``,
``tensor`` (torch tensors and numpy arrays) and ``other``. A record that is not a dict makes the part's
types unknown (``None``), as does a part written from already encoded lines.
"""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

import numpy as np

_NAMES: Dict[type, str] = {
    type(None): "null",
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    bytes: "bytes",
    list: "list",
    tuple: "list",
    dict: "dict",
}
NUMERIC = frozenset({"int", "float"})


def type_name(t: type) -> str:
    """The name of a value type (subclasses and numpy scalars by what they are)."""
    name = _NAMES.get(t)
    if name is not None:
        return name
    if issubclass(t, (bool, np.bool_)):
        return "bool"
    if issubclass(t, (int, np.integer)):
        return "int"
    if issubclass(t, (float, np.floating)):
        return "float"
    if issubclass(t, str):
        return "str"
    if issubclass(t, np.ndarray) or t.__module__.startswith("torch") and t.__name__ == "Tensor":
        return "tensor"
    if issubclass(t, Mapping):
        return "dict"
    return "other"


class FieldTypes:
    """Accumulates the value types of each field over the batches a part writes."""

    def __init__(self) -> None:
        self._types: Optional[Dict[str, Set[type]]] = {}

    @property
    def known(self) -> bool:
        return self._types is not None

    def forget(self) -> None:
        """The part's types cannot be known (records that are not dicts, lines encoded elsewhere)."""
        self._types = None

    def observe(self, recs: List[Any], skip: Iterable[int] = ()) -> None:
        """Add the types of ``recs`` (a batch), except the records at the indexes in ``skip``."""
        types = self._types
        if types is None or not recs:
            return
        dropped = set(skip)
        batch = [r for i, r in enumerate(recs) if i not in dropped] if dropped else recs
        if not all(type(r) is dict or isinstance(r, Mapping) for r in batch):
            self.forget()
            return
        names = set().union(*batch)
        for name in names:
            seen = {type(r.get(name)) for r in batch}  # a record without the field: null
            got = types.get(name)
            if got is None:
                types[name] = seen
            else:
                got |= seen

    def to_json(self) -> Optional[Dict[str, List[str]]]:
        if self._types is None:
            return None
        return {name: sorted({type_name(t) for t in ts}) for name, ts in sorted(self._types.items())}


def merge(docs: Iterable[Optional[Mapping[str, Iterable[str]]]]) -> Optional[Dict[str, List[str]]]:
    """The union of parts' ``field_types`` (None if any part's are unknown). A field some parts lack
    is null there."""
    docs = list(docs)
    if not docs or any(d is None for d in docs):
        return None
    names = {n for d in docs if d is not None for n in d}
    out: Dict[str, List[str]] = {}
    for name in sorted(names):
        got: Set[str] = set()
        for d in docs:
            assert d is not None
            got |= set(d.get(name, ("null",)))
        out[name] = sorted(got)
    return out


def scalar_kind(types: Iterable[str]) -> Optional[str]:
    """``"float"``, ``"int"`` or ``"bool"`` when a field's values (nulls aside) are all numbers of
    that kind (ints and floats together: ``"float"``), else None."""
    present = set(types) - {"null"}
    if not present:
        return None
    if present == {"bool"}:
        return "bool"
    if present <= NUMERIC:
        return "float" if "float" in present else "int"
    return None
