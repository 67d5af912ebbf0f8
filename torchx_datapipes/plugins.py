"""One registry for every pluggable kind (cache providers, queue brokers, formats...).

Layered like fsspec's ``registry.py``: a table of import strings for the built-in plug-ins (so
``import torchx_datapipes`` never imports redis, pika or pyarrow), :meth:`Registry.register`
for code, and an entry-point group for third-party packages. Every kind shares:

- one entry-point scan per process for all groups (:func:`entry_point_table`: ``entry_points()``
  reads every installed distribution's metadata, ~20 ms, and was once asked for every part);
- one import with one install hint (:func:`load_ref`): a built-in plug-in whose client library
  is missing raises :class:`MissingExtraError` naming the ``pip install`` line of its extra.

Non-goals: ordering or priorities between plug-ins (a name is taken once: ``clobber=True``
replaces it), and unloading imported modules.
"""

import functools
import importlib
import itertools
from importlib.metadata import entry_points
from typing import Any, Dict, Generic, Iterable, Optional, Tuple, TypeVar, Union

from torchx_datapipes.errors import DatapipesError

T = TypeVar("T")


class MissingExtraError(DatapipesError, ImportError):
    """A plug-in's client library is not installed; the message holds the pip line of its extra."""


def missing_extra(message: str, extra: str) -> MissingExtraError:
    """The one install-hint error: ``message`` and the pip line of ``extra``."""
    return MissingExtraError(f"{message}: pip install 'torchx-datapipes[{extra}]'")


@functools.cache
def _entry_point_groups() -> Dict[str, Tuple[Tuple[str, str], ...]]:
    """Every group's ``(name, "module:attr")`` pairs of every installed distribution: one scan per
    process (each ``entry_points(group=...)`` call would read all the metadata again)."""
    found: Any = entry_points()
    # Python < 3.12 returns the entry points grouped, in a dict whose own methods warn (deprecated)
    eps: Iterable[Any] = itertools.chain(*dict.values(found)) if isinstance(found, dict) else found
    groups: Dict[str, Tuple[Tuple[str, str], ...]] = {}
    for ep in eps:
        groups[ep.group] = (*groups.get(ep.group, ()), (ep.name, ep.value))
    return groups


def entry_point_table(group: str) -> Tuple[Tuple[str, str], ...]:
    """The group's ``(name, "module:attr")`` pairs, scanned once per process."""
    return _entry_point_groups().get(group, ())


def forget_entry_points() -> None:
    """Scan the installed distributions again at the next lookup (a package installed meanwhile; tests)."""
    _entry_point_groups.cache_clear()


def load_ref(ref: str, hint: Optional[Tuple[str, str]] = None, what: str = "") -> Any:
    """Import ``"module:attr"``; with ``hint`` = (extra, library), a missing module raises
    :class:`MissingExtraError` with ``pip install 'torchx-datapipes[extra]'``."""
    module, _, attr = ref.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        if hint is None:
            raise
        extra, lib = hint
        raise missing_extra(f"{what or module} needs {lib} ({e})", extra) from e
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Names to plug-ins of one kind: registered from code, built in, or by entry point (that order)."""

    def __init__(
        self,
        kind: str,
        group: str,
        known: Dict[str, str],
        extras: Optional[Dict[str, Tuple[str, str]]] = None,
    ) -> None:
        """``kind`` names the plug-ins in messages ("queue scheme"); ``extras``: module -> (extra, library)
        for the built-in plug-ins whose client library is optional."""
        self.kind, self.group = kind, group
        self._known = dict(known)
        self._extras = dict(extras or {})
        self._registered: Dict[str, Union[str, T]] = {}
        self._loaded: Dict[str, T] = {}

    def register(self, name: str, target: Union[str, T], clobber: bool = False) -> None:
        """Make ``name`` load ``target`` (the object, or ``"module:attr"``)."""
        if not clobber and name in self.names():
            raise ValueError(f"{self.kind} {name!r} is already registered; pass clobber=True to replace it")
        self._registered[name] = target
        self._loaded.pop(name, None)

    def unregister(self, name: str) -> None:
        """Forget a plug-in registered from code (tests, a notebook re-running a cell)."""
        self._registered.pop(name, None)
        self._loaded.pop(name, None)

    def names(self) -> Tuple[str, ...]:
        eps = {name for name, _ in entry_point_table(self.group)}
        return tuple(sorted({*self._known, *self._registered, *eps}))

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def ref(self, name: str) -> Union[str, T, None]:
        """What ``name`` points to, without importing it (None: unknown)."""
        target: Union[str, T, None] = self._registered.get(name) or self._known.get(name)
        if target is None:
            target = dict(entry_point_table(self.group)).get(name)
        return target

    def load(self, name: str) -> T:
        """The plug-in ``name`` (imports its module, and so its client library, now; cached)."""
        if name in self._loaded:
            return self._loaded[name]
        target = self.ref(name)
        if target is None:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")
        if isinstance(target, str):
            module = target.partition(":")[0]
            target = load_ref(target, self._extras.get(module), f"{self.kind} {name!r}")
        self._loaded[name] = target  # type: ignore[assignment]
        return target  # type: ignore[return-value]
