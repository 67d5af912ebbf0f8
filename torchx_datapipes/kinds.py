"""How a user function declares what it consumes and produces.

* plain function (default): one record in; a record (map), ``None`` (filter) or a
  list/tuple/iterator of records (flat-map) out.
* ``@batched``: a list of records in, an iterable of records out.
* ``@pipeline``: receives an ``IterDataPipe`` over the unit's records (or a
  ``torchdata.nodes`` node with ``@pipeline(kind="nodes")``) and returns an iterable.

The declaration is an attribute on the function, so it survives cloudpickle (by value
and by reference) and torch.package; callables that cannot carry attributes are wrapped
by composition in :class:`Declared`.
"""

import enum
from dataclasses import dataclass
from typing import Any, Callable, TypeVar, Union

F = TypeVar("F", bound=Callable[..., Any])

_ATTR = "__torchx_datapipes_kind__"


class FnKind(str, enum.Enum):
    RECORD = "record"
    BATCHED = "batched"
    DATAPIPE = "datapipe"
    NODES = "nodes"


@dataclass(frozen=True)
class Declared:
    """A callable plus its declared kind, for callables that reject attributes."""

    fn: Callable[..., Any]
    kind: FnKind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _declare(fn: Any, kind: FnKind) -> Any:
    if not callable(fn):
        raise TypeError(f"expected a callable, got {type(fn).__name__}: {fn!r}")
    try:
        setattr(fn, _ATTR, kind.value)
        return fn
    except (AttributeError, TypeError):
        return Declared(fn, kind)


def batched(fn: F) -> F:
    """Declare ``fn(list_of_records) -> iterable_of_records``."""
    return _declare(fn, FnKind.BATCHED)  # type: ignore[no-any-return]


def pipeline(fn: Union[F, None] = None, *, kind: str = "datapipe") -> Any:
    """Declare a pipeline builder: ``fn(source) -> iterable``.

    ``kind="datapipe"`` (default) passes a ``torch.utils.data.IterDataPipe``;
    ``kind="nodes"`` passes a ``torchdata.nodes.BaseNode``.
    """
    try:
        fk = {"datapipe": FnKind.DATAPIPE, "nodes": FnKind.NODES}[kind]
    except KeyError:
        raise ValueError(f"pipeline kind must be 'datapipe' or 'nodes', got {kind!r}") from None
    if fn is None:
        return lambda f: _declare(f, fk)
    return _declare(fn, fk)


def kind_of(fn: Any) -> FnKind:
    """The declared kind of ``fn`` (``FnKind.RECORD`` when undeclared)."""
    if isinstance(fn, Declared):
        return fn.kind
    return FnKind(getattr(fn, _ATTR, FnKind.RECORD.value))
