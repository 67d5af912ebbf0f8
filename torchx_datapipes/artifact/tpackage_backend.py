"""The torch.package backend: a zip holding the user's module *sources* plus a pickle.

User modules (see :func:`torchx_datapipes.artifact.modules.is_user_module`) are interned, so the
artifact is hermetic for user code; stdlib, installed packages and ``torchx_datapipes``
are externed and must be installed where the job runs.

What it cannot do, by design: torch.package pickles functions and classes *by module
reference* and re-imports the module from the stored source (re-executing its top level
on every load). So lambdas, closures / nested functions, anything defined in ``__main__``
or a notebook cell, and instances of such classes cannot be shipped. :func:`unsupported`
finds them before export so the user gets one clear message pointing at cloudpickle.
"""

import functools
import io
import pickle
import sys
import types
from typing import Any, Iterator, Mapping

from torchx_datapipes.artifact import serialcheck
from torchx_datapipes.artifact.modules import is_user_module
from torchx_datapipes.errors import NotSerializableError

PACKAGE, RESOURCE = "artifact", "obj.pkl"


def _shipped(obj: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Functions and classes pickled by reference when ``obj`` is pickled."""
    if depth > 8:
        return
    if isinstance(obj, (types.FunctionType, type)):
        yield path, obj
    elif isinstance(obj, types.MethodType):
        yield from _shipped(obj.__func__, f"{path}.__func__", depth + 1)
        yield from _shipped(obj.__self__, f"{path}.__self__", depth + 1)
    elif isinstance(obj, functools.partial):
        yield from _shipped(obj.func, f"{path}.func", depth + 1)
        for i, arg in enumerate(obj.args):
            yield from _shipped(arg, f"{path}.args[{i}]", depth + 1)
        for key, value in obj.keywords.items():
            yield from _shipped(value, f"{path}.keywords[{key!r}]", depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(obj):
            yield from _shipped(value, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _shipped(value, f"{path}[{key!r}]", depth + 1)
    elif not isinstance(obj, (types.ModuleType, types.BuiltinFunctionType)):
        yield f"type({path})", type(obj)
        for key, value in _pickled_state(obj).items():
            yield from _shipped(value, f"{path}.{key}", depth + 1)


def _pickled_state(obj: Any) -> Mapping[str, Any]:
    """The attributes pickling keeps: a custom ``__getstate__()``'s dict, else ``__dict__``.

    Objects that drop live state (connections, locks) in ``__getstate__`` -- e.g. caches --
    must not be refused for what they never pickle.
    """
    getstate = getattr(type(obj), "__getstate__", None)
    if getstate is not None and getstate is not getattr(object, "__getstate__", None):
        try:
            state = obj.__getstate__()
        except Exception:
            state = None
        if isinstance(state, dict):
            return state
    return getattr(obj, "__dict__", {})


def _problem(obj: Any) -> str | None:
    qualname: str = getattr(obj, "__qualname__", "")
    module_name = getattr(obj, "__module__", None) or ""
    module = sys.modules.get(module_name)
    if getattr(obj, "__name__", "") == "<lambda>":
        return "a lambda"
    if "<locals>" in qualname:
        return "a closure / function or class defined inside another function"
    if module_name == "__main__":
        return "defined in __main__ (a script run directly, or a notebook cell)"
    if module is None:
        return f"defined in module {module_name!r}, which is not imported" if module_name else None
    if not getattr(module, "__file__", None) and is_user_module(module):
        return "defined in a module with no source file"
    return None


def unsupported(obj: Any, root: str) -> str | None:
    """A message explaining why torch.package cannot ship ``obj``, or ``None``."""
    for path, item in _shipped(obj, root):
        problem = _problem(item)
        if problem is not None:
            name = f"{getattr(item, '__module__', '?')}.{getattr(item, '__qualname__', '?')}"
            return (
                f"the torch.package backend cannot ship {path} ({name}): it is {problem}."
                " torch.package stores functions and classes by module reference and re-imports the"
                " module's source. Use backend='cloudpickle', or move it to a module-level def in a .py file."
            )
    return None


def _intern_patterns() -> list[str]:
    names = []
    for name, module in list(sys.modules.items()):
        if isinstance(module, types.ModuleType) and name != "__main__" and getattr(module, "__file__", None):
            if is_user_module(module) and name.isascii():
                names.append(name)
    return sorted(names)


def dumps(obj: Any) -> bytes:
    """Export ``obj`` into torch.package zip bytes (user modules interned, the rest externed)."""
    from torch.package import PackageExporter

    buffer = io.BytesIO()
    with PackageExporter(buffer) as exporter:
        patterns = _intern_patterns()
        if patterns:
            exporter.intern(patterns)
        exporter.extern("**")  # first matching pattern wins, so user modules stay interned
        exporter.save_pickle(PACKAGE, RESOURCE, obj)
    return buffer.getvalue()


def importer(data: bytes) -> Any:
    """A ``PackageImporter`` over ``data``; each one re-executes the interned modules it imports."""
    from torch.package import PackageImporter

    return PackageImporter(io.BytesIO(data))


def loads(data: bytes) -> Any:
    """Import the package from ``data`` and unpickle the shipped object."""
    return importer(data).load_pickle(PACKAGE, RESOURCE)


def pickle_dumps(obj: Any) -> bytes:
    """What the torch.package pickler needs: plain pickle, functions by reference."""
    return pickle.dumps(obj, protocol=3)


class TorchPackageBackend:
    """The ``torch.package`` entry of ``artifact.BACKENDS``."""

    def check(self, obj: Any) -> None:
        reason = unsupported(obj, serialcheck.root_name(obj))
        if reason is not None:
            raise NotSerializableError(reason)
        serialcheck.check(obj, pickle_dumps, "torch.package")

    def checked_dumps(self, obj: Any) -> bytes:
        self.check(obj)
        return self.dumps(obj)

    def dumps(self, obj: Any) -> bytes:
        try:
            return dumps(obj)
        except Exception as e:
            raise NotSerializableError(
                f"torch.package could not export {obj!r}: {e}. Use backend='cloudpickle' if the code"
                " cannot be imported from its source files."
            ) from e

    def loads(self, payload: bytes) -> Any:
        return loads(payload)

    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> str | None:
        return None  # sources + protocol-3 pickle: portable across Python and torch 2.x versions
