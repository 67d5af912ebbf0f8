"""Module references: resolve ``"pkg.mod:fn"`` / ``"path/file.py:fn"`` specs, and decide
which modules will be importable where the runner runs.

A module is *installed* when it is builtin/frozen, lives in the stdlib or a
site-packages directory, or belongs to ``torchx_datapipes`` itself (the runner always has
it). Every other module -- ``__main__``, notebook cells, files next to the user's script,
an editable checkout -- is a *user* module: the cloudpickle backend pickles it by value and
the torch.package backend interns it.
"""

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import site
import sys
import sysconfig
import types
from typing import Any, Callable, Iterator, Mapping

from torchx_datapipes.errors import ArtifactError

_OWN_PACKAGE = __name__.split(".")[0]


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots))


def is_user_module(module: types.ModuleType) -> bool:
    """True when ``module`` is probably not importable on the runner (see module docstring)."""
    name = module.__name__
    if name == "__main__":
        return True
    if name.split(".")[0] == _OWN_PACKAGE or name in sys.builtin_module_names:
        return False
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.origin in ("built-in", "frozen"):
        return False
    path = getattr(module, "__file__", None)
    if not path:
        return True  # created at runtime (types.ModuleType, exec): nowhere to import it from
    return not os.path.realpath(path).startswith(_installed_roots())


def _is_extension(module: types.ModuleType) -> bool:
    path = getattr(module, "__file__", None) or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def _module_of(obj: Any) -> types.ModuleType | None:
    if isinstance(obj, types.ModuleType):
        return obj
    name = getattr(obj, "__module__", None)
    return sys.modules.get(name) if isinstance(name, str) else None


def _children(obj: Any) -> Iterator[Any]:
    """Objects ``obj`` refers to that may live in other user modules."""
    if isinstance(obj, types.ModuleType):
        yield from list(vars(obj).values())
    elif isinstance(obj, types.FunctionType):
        globs = obj.__globals__
        yield from (globs[n] for n in _code_names(obj.__code__) if n in globs)
        yield from (c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not c)
        yield from obj.__defaults__ or ()
        yield from (obj.__kwdefaults__ or {}).values()
    elif isinstance(obj, types.MethodType):
        yield from (obj.__func__, obj.__self__)
    elif isinstance(obj, functools.partial):
        yield from (obj.func, *obj.args, *obj.keywords.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        yield from obj
    elif isinstance(obj, dict):
        yield from obj.values()
    elif not isinstance(obj, type):
        yield type(obj)
        yield from getattr(obj, "__dict__", {}).values()


def user_modules(obj: Any, *, max_objects: int = 20_000) -> list[str]:
    """Names of the user modules ``obj`` depends on, transitively, sorted.

    Follows functions' referenced globals, closures and defaults, ``partial`` parts,
    instance state, and whole user modules (their functions, classes and imports), so a
    helper module imported by the user's module is found too. Installed modules are never
    entered. Extension modules are skipped: they cannot be shipped by value.
    """
    found: set[str] = set()
    seen: set[int] = set()
    stack = [obj]
    while stack and len(seen) < max_objects:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        module = _module_of(cur)
        if isinstance(cur, (types.ModuleType, type, types.FunctionType)):
            if module is not None and (not is_user_module(module) or _is_extension(module)):
                continue  # installed (or unshippable): referenced by name, never entered
            if module is not None and module.__name__ not in found:
                # only modules registered under their name can be pickled by value (a module
                # loaded with spec_from_file_location and never added to sys.modules cannot)
                if sys.modules.get(module.__name__) is module:
                    found.add(module.__name__)
                stack.append(module)
        stack.extend(_children(cur))
    return sorted(found)


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``"target:attr.path"``; ``ValueError`` showing the accepted forms otherwise."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ValueError(
            f"bad callable spec {spec!r}: expected 'pkg.module:fn' or 'path/to/file.py:fn'"
            " (attribute paths like 'pkg.module:Class.method' are allowed)"
        )
    return target, attr


def is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _import_file(path: str) -> types.ModuleType:
    full = os.path.realpath(path)
    if not os.path.isfile(full):
        raise FileNotFoundError(
            f"{path!r} (resolved to {full}) does not exist; file specs are relative to the cwd"
        )
    stem = os.path.splitext(os.path.basename(full))[0]
    for name in (stem, f"_txdp_file_{stem}_{hashlib.sha256(full.encode()).hexdigest()[:10]}"):
        existing = sys.modules.get(name)
        if existing is not None and os.path.realpath(getattr(existing, "__file__", "") or "") == full:
            return existing
        if existing is None and name.isidentifier():
            break
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path!r}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    if os.path.dirname(full) not in sys.path:  # like `python file.py`: sibling imports work
        sys.path.append(os.path.dirname(full))
    sys.modules[name] = module  # so pickling by value / dataclasses can find it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def import_target(target: str) -> types.ModuleType:
    """Import a module name or a ``.py`` path (relative to the cwd)."""
    if is_file_target(target):
        return _import_file(target)
    try:
        return importlib.import_module(target)
    except ImportError as e:
        raise ImportError(
            f"cannot import module {target!r} from spec ({e}); install it, or pass a file path"
            f" such as 'path/to/{target.replace('.', '/')}.py:fn'"
        ) from e


def resolve_spec(spec: str) -> Callable[..., Any]:
    """Turn ``"pkg.module:fn"`` or ``"path/to/file.py:fn"`` into the live callable.

    File paths are relative to the current directory; the file's directory is appended to
    ``sys.path`` so its sibling imports work, as with ``python file.py``. The attribute part may be dotted
    (``"mod:Class.method"``, ``"mod:obj"``); the result must be callable.
    """
    target, attr = parse_spec(spec)
    obj: Any = import_target(target)
    for i, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            where = target if i == 0 else ".".join(attr.split(".")[:i])
            public = sorted(n for n in dir(obj) if not n.startswith("_"))[:20]
            raise AttributeError(
                f"{where!r} has no attribute {part!r} (spec {spec!r}); it has: {public}"
            ) from e
    if not callable(obj):
        raise TypeError(f"spec {spec!r} names a {type(obj).__name__}, not a callable")
    return obj  # type: ignore[no-any-return]


class ModuleBackend:
    """The ``module`` entry of ``artifact.BACKENDS``: a JSON reference resolved on the runner."""

    def check(self, obj: Any) -> None:
        if not isinstance(obj, str):
            raise TypeError(
                f"backend='module' takes a spec string such as 'pkg.module:fn' or 'path/to/file.py:fn',"
                f" got {type(obj).__name__}: {obj!r}"
            )
        parse_spec(obj)
        try:
            resolve_spec(obj)
        except Exception as e:  # the module's own import errors too: it runs user code
            raise ArtifactError(f"spec {obj!r} does not resolve on the client: {e}") from e

    def checked_dumps(self, obj: Any) -> bytes:
        self.check(obj)
        return self.dumps(obj)

    def dumps(self, obj: Any) -> bytes:
        target, attr = parse_spec(obj)
        if is_file_target(target):
            target = os.path.normpath(target)
        return json.dumps({"spec": f"{target}:{attr}"}, sort_keys=True).encode()

    def loads(self, payload: bytes) -> Any:
        return resolve_spec(json.loads(payload)["spec"])

    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> str | None:
        return None
