"""Which modules will be importable where the runner runs, and which must travel with the artifact.

A module is *installed* when it is builtin/frozen, lives in the stdlib or a site-packages
directory, belongs to an installed distribution (its file is listed in the ``RECORD`` of a
``*.dist-info`` -- this covers ``pip install --target DIR`` and packages on
``PYTHONPATH``), or belongs to ``torchx_datapipes`` itself (the runner always has it).
Installed modules are pickled by reference: the job's image must have them, as it has
torch. Every other module -- ``__main__``, notebook cells, files next to the user's script,
an editable checkout (its sources are not in any ``RECORD``) -- is a *user* module: the
cloudpickle backend pickles it by value and the torch.package backend interns it.

Why not by value for everything found off site-packages: a distribution with an extension
module (``tokenizers``) cannot be rebuilt from its Python submodules, and loading them by
value next to the installed extension fails (``Tokenizer has no attribute __getnewargs__``).
"""

import functools
import importlib.machinery
import importlib.metadata
import os
import site
import sys
import sysconfig
import types
from typing import Any, Iterator, Optional

_OWN_PACKAGE = __name__.split(".")[0]


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(site.getsitepackages())
    roots.add(site.getusersitepackages())
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots))


def _top_levels(dist: importlib.metadata.Distribution) -> set[str]:
    """Import names a distribution provides: ``top_level.txt`` and the first part of its files."""
    names = set((dist.read_text("top_level.txt") or "").split())
    for f in dist.files or ():
        if len(f.parts) > 1:
            names.add(f.parts[0])
        elif f.suffix in (".py", *importlib.machinery.EXTENSION_SUFFIXES):
            names.add(f.name.split(".", 1)[0])
    return names


@functools.lru_cache(maxsize=8)
def _distributions(
    path: tuple[str, ...], everywhere: bool
) -> dict[str, list[importlib.metadata.Distribution]]:
    """Top-level import name -> distributions on ``path`` that provide it (cached per sys.path).

    Unless ``everywhere``, distributions in site-packages are left out: their modules count
    as installed by path already, and reading their file lists (torch has thousands) would
    cost every process that packages a user module.
    """
    out: dict[str, list[importlib.metadata.Distribution]] = {}
    roots = _installed_roots()
    for dist in importlib.metadata.distributions(path=list(path)):
        if not everywhere and (os.path.realpath(str(dist.locate_file(""))) + os.sep).startswith(roots):
            continue
        for name in _top_levels(dist):
            out.setdefault(name, []).append(dist)
    return out


@functools.lru_cache(maxsize=256)
def _dist_files(dist: importlib.metadata.Distribution) -> frozenset[str]:
    return frozenset(os.path.realpath(str(dist.locate_file(f))) for f in dist.files or ())


def distribution_of(
    module: types.ModuleType, *, everywhere: bool = False
) -> Optional[importlib.metadata.Distribution]:
    """The installed distribution whose file list holds ``module``'s file, or ``None``.

    Only distributions outside site-packages are searched unless ``everywhere``.
    """
    path = getattr(module, "__file__", None)
    if not path:
        return None
    real = os.path.realpath(path)
    for dist in _distributions(tuple(sys.path), everywhere).get(module.__name__.split(".")[0], ()):
        if real in _dist_files(dist):
            return dist
    return None


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
        return _is_user_namespace(module)
    if os.path.realpath(path).startswith(_installed_roots()):
        return False
    return distribution_of(module) is None


def _is_user_namespace(module: types.ModuleType) -> bool:
    """A module without a file: a namespace package (``google``), or made at runtime.

    A namespace package whose every location is installed (in site-packages, or provided by
    an installed distribution) is installed: pickling it by value would take every installed
    subpackage (``google.protobuf``) by value with it.
    """
    locations = [os.path.realpath(p) + os.sep for p in getattr(module, "__path__", None) or ()]
    if not locations:
        return True  # created at runtime (types.ModuleType, exec): nowhere to import it from
    provided = _distributions(tuple(sys.path), False).get(module.__name__.split(".")[0], [])
    provided_at = {os.path.realpath(str(d.locate_file(""))) + os.sep for d in provided}
    return not all(
        loc.startswith(_installed_roots()) or loc.startswith(tuple(provided_at)) for loc in locations
    )


def is_extension(module: types.ModuleType) -> bool:
    path = getattr(module, "__file__", None) or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def code_names(code: types.CodeType) -> Iterator[str]:
    """Global and attribute names a code object (and its nested code) refers to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_names(const)


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
        yield from (globs[n] for n in code_names(obj.__code__) if n in globs)
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
            if module is not None and (not is_user_module(module) or is_extension(module)):
                continue  # installed (or unshippable): referenced by name, never entered
            if module is not None and module.__name__ not in found:
                # only modules registered under their name can be pickled by value (a module
                # loaded with spec_from_file_location and never added to sys.modules cannot)
                if sys.modules.get(module.__name__) is module:
                    found.add(module.__name__)
                stack.append(module)
        stack.extend(_children(cur))
    return sorted(found)
