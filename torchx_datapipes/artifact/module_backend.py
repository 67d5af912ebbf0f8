"""The ``module`` backend: a reference ``"pkg.module:fn"`` / ``"path/file.py:fn"`` resolved on the runner.

Nothing is pickled; the code must be in the job's workspace or image. So that the job's
fingerprint covers the code that will run, the payload also pins it: the sha256 of the
referenced module's source file and of every user module it uses (see
:mod:`.modules`), and the name and version of the distribution the module belongs to, if
any. Editing the module therefore changes the artifact's sha256 (a relaunch redoes the
units instead of resuming over them), and a runner whose copy of the code differs from
what was packaged refuses to load it. Modules from the stdlib are not pinned: the header's
Python version stands for them. Artifacts whose payload holds only ``"spec"`` (made
before the pin existed) still load, unchecked.
"""

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import types
from typing import Any, Callable, Mapping, Optional

from torchx_datapipes.artifact.modules import distribution_of, is_user_module, user_modules
from torchx_datapipes.errors import ArtifactError

_FIX = (
    "Re-run the command to package it again. If the job's image holds other code at that path on"
    " purpose, rebuild the image from the code you packaged (or package from the image's code)."
)


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


def _file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _pinned(module: types.ModuleType) -> bool:
    """Modules whose code is pinned: the user's own, and those of installed distributions."""
    return bool(getattr(module, "__file__", None)) and (
        is_user_module(module) or distribution_of(module, everywhere=True) is not None
    )


def code_pin(spec: str) -> dict[str, Any]:
    """``{"sources": {name: sha256}, "distribution": {...}}`` for the code ``spec`` will run.

    The spec's own target is keyed by the target as written in the spec (a file path or
    module name), its user helper modules by module name.
    """
    target, _ = parse_spec(spec)
    module = import_target(target)
    fn = resolve_spec(spec)
    sources: dict[str, str] = {}
    if _pinned(module):
        sources[target] = _file_sha256(module.__file__ or "")
    for name in user_modules(fn):
        helper = sys.modules.get(name)
        if helper is not None and helper is not module and getattr(helper, "__file__", None):
            sources[name] = _file_sha256(helper.__file__ or "")
    pin: dict[str, Any] = {"sources": sources}
    dist = distribution_of(module, everywhere=True)
    if dist is not None:
        pin["distribution"] = {"name": dist.metadata["Name"], "version": dist.version}
    return pin


def _changed(path: str, what: str, spec: str, actual: str, expected: str) -> ArtifactError:
    return ArtifactError(
        f"the module changed since the job was packaged: {path} ({what}, used by spec {spec!r}) has"
        f" sha256 {actual}, the artifact recorded {expected}. {_FIX}"
    )


def _target_file(target: str) -> Optional[str]:
    """The file importing ``target`` would execute, found without executing it."""
    if is_file_target(target):
        return target if os.path.isfile(target) else None
    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None  # resolve_spec reports it
    return found.origin if found is not None and found.has_location else None


def verify_target_before_import(spec: str, pin: Mapping[str, Any]) -> None:
    """Refuse a changed target module before its top level runs (helpers: :func:`verify_pin`)."""
    target, _ = parse_spec(spec)
    expected = dict(pin.get("sources", {})).get(target)
    path = _target_file(target) if expected is not None else None
    if expected is not None and path is not None:
        actual = _file_sha256(path)
        if actual != expected:
            raise _changed(path, f"module {target!r}", spec, actual, expected)


def verify_pin(spec: str, pin: Mapping[str, Any]) -> None:
    """Raise :class:`ArtifactError` when the code here differs from what ``pin`` recorded."""
    target, _ = parse_spec(spec)
    module = import_target(target)
    recorded = pin.get("distribution")
    if recorded is not None:
        dist = distribution_of(module, everywhere=True)
        here = None if dist is None else {"name": dist.metadata["Name"], "version": dist.version}
        if here != recorded:
            found = "no installed distribution" if here is None else f"{here['name']} {here['version']}"
            raise ArtifactError(
                f"the module changed since the job was packaged: spec {spec!r} was packaged from"
                f" {recorded['name']} {recorded['version']}, but here {module.__name__} comes from"
                f" {found} ({module.__file__}). {_FIX}"
            )
    for name, expected in dict(pin.get("sources", {})).items():
        current = module if name == target else sys.modules.get(name)
        if current is None or not getattr(current, "__file__", None):
            continue  # a helper this import did not load: nothing of it runs yet
        actual = _file_sha256(current.__file__ or "")
        if actual != expected:
            raise _changed(current.__file__ or "", f"module {current.__name__!r}", spec, actual, expected)


class ModuleBackend:
    """The ``module`` entry of ``artifact.BACKENDS``: a pinned reference resolved on the runner."""

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
        spec = f"{target}:{attr}"
        return json.dumps({"spec": spec, **code_pin(spec)}, sort_keys=True).encode()

    def loads(self, payload: bytes) -> Any:
        fields = json.loads(payload)
        verify_target_before_import(fields["spec"], fields)
        fn = resolve_spec(fields["spec"])
        verify_pin(fields["spec"], fields)
        return fn

    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> Optional[str]:
        return None
