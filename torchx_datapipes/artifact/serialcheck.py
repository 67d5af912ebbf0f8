"""Find *what* inside a callable cannot be pickled, and say so with a path.

``pickle`` reports "cannot pickle '_thread.lock' object" and nothing about where the lock
lives. We try to pickle the object; if that fails we try each of its parts -- closure
cells by free-variable name, referenced globals, defaults, ``partial`` parts, instance
attributes, container items -- and recurse only into the parts that fail, so the report
names the deepest culprit (``clean.__closure__['conn']: socket.socket``). Parts that
pickle are never entered, and modules are entered only when they fail themselves (a user
module shipped by value).
"""

import functools
import types
from typing import Any, Callable, Iterator

from torchx_datapipes.artifact.modules import code_names
from torchx_datapipes.errors import NotSerializableError

_MAX_DEPTH = 12

_HINT = (
    "Do not capture live resources (connections, sockets, locks, open files, clients, threads)."
    " Create them inside the function, or lazily once per process, e.g. a module-level"
    " `_conn = None` that the function fills on first call; pass only plain config (URLs, paths)."
)


def type_name(obj: Any) -> str:
    """``socket.socket``, ``_thread.lock``; builtins without the ``builtins.`` prefix."""
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _function_parts(fn: types.FunctionType, path: str) -> Iterator[tuple[str, Any]]:
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            yield f"{path}.__closure__[{name!r}]", cell.cell_contents
        except ValueError:  # empty cell: the variable was never assigned
            continue
    globs = fn.__globals__
    for name in dict.fromkeys(code_names(fn.__code__)):
        if name in globs:
            yield f"{path}.__globals__[{name!r}]", globs[name]
    for i, value in enumerate(fn.__defaults__ or ()):
        yield f"{path}.__defaults__[{i}]", value
    for name, value in (fn.__kwdefaults__ or {}).items():
        yield f"{path}.__kwdefaults__[{name!r}]", value
    for name, value in vars(fn).items():
        yield f"{path}.__dict__[{name!r}]", value


def _attrs(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    for name, value in getattr(obj, "__dict__", {}).items():
        if not (isinstance(obj, (type, types.ModuleType)) and name.startswith("__")):
            yield f"{path}.{name}", value
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                yield f"{path}.{name}", getattr(obj, name)


def parts(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(path, child)`` pairs that ``obj`` pickles along with itself."""
    if isinstance(obj, types.FunctionType):
        yield from _function_parts(obj, path)
    elif isinstance(obj, types.MethodType):
        yield from ((f"{path}.__self__", obj.__self__), (f"{path}.__func__", obj.__func__))
    elif isinstance(obj, functools.partial):
        yield f"{path}.func", obj.func
        yield from ((f"{path}.args[{i}]", a) for i, a in enumerate(obj.args))
        yield from ((f"{path}.keywords[{k!r}]", v) for k, v in obj.keywords.items())
    elif isinstance(obj, dict):
        yield from ((f"{path}[{k!r}]", v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        yield from ((f"{path}[{i}]", v) for i, v in enumerate(obj))
    elif isinstance(obj, (set, frozenset)):
        yield from ((f"{path}{{{v!r}}}", v) for v in obj)
    else:
        yield from _attrs(obj, path)


def _culprit(
    obj: Any, path: str, dumps: Callable[[Any], bytes], depth: int, seen: set[int]
) -> tuple[str, Any, BaseException] | None:
    try:
        dumps(obj)
        return None
    except Exception as e:  # any failure: PicklingError, TypeError, RecursionError, ...
        error: BaseException = e
    if depth < _MAX_DEPTH and id(obj) not in seen:
        seen.add(id(obj))
        for child_path, child in parts(obj, path):
            found = _culprit(child, child_path, dumps, depth + 1, seen)
            if found is not None:
                return found
    return path, obj, error


def root_name(obj: Any) -> str:
    """How the report names ``obj``: ``clean``, ``<lambda>``, ``partial(add)``, ``Scaler``."""
    if isinstance(obj, functools.partial):
        return f"partial({root_name(obj.func)})"
    name = getattr(obj, "__name__", None)
    return name if isinstance(name, str) else type(obj).__name__


def check(obj: Any, dumps: Callable[[Any], bytes], backend: str) -> None:
    """Raise :class:`NotSerializableError` naming the path of what ``dumps`` cannot pickle."""
    found = _culprit(obj, root_name(obj), dumps, 0, set())
    if found is None:
        return
    path, culprit, error = found
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    err = NotSerializableError(
        f"cannot serialize {root_name(obj)!r} with the {backend} backend:"
        f" {path}: {type_name(culprit)} cannot be pickled ({detail}). {_HINT}"
    )
    err.path, err.type_name = path, type_name(culprit)  # type: ignore[attr-defined]
    raise err from error
