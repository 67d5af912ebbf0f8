"""Ship the user's transform to the job: package it on the client, load it on every rank.

``package(fn, store)`` writes content-addressed bytes to ``{store}/{sha256}.{ext}`` (any
fsspec URL or a local path) plus a ``{sha256}.json`` sidecar for people, and returns an
:class:`ArtifactRef`. ``load(url, sha256)`` verifies the hash, then the versions, and only
then deserializes. Three backends (``BACKENDS``):

* ``cloudpickle`` (default): everything a user can write -- lambdas, closures, partials,
  callable objects, ``__main__``/notebook code. Modules that will not be importable on the
  runner are pickled by value. Bytecode: load with the same Python minor version.
* ``torch.package``: user module *sources* interned in a zip; hermetic, survives Python
  upgrades, but only module-level functions/classes (no lambdas, closures, ``__main__``).
* ``module``: a JSON reference ``"pkg.module:fn"`` / ``"path/to/file.py:fn"`` resolved on
  the runner; nothing is pickled, the code must be in the job's workspace or image.

Non-goals: long-term storage of cloudpickle artifacts (re-package after an upgrade), and
safety against a hostile store -- loading an artifact runs its code, so pin the sha256.
See ``docs/serialization.md`` for the measured comparison.

File layout: a header line ``TXDP-ARTIFACT {json}\\n`` (format, backend, versions) then the
payload. The versions travel inside the hashed bytes, so a copied artifact is still
checked before anything is unpickled, and no timestamp is hashed, so packaging the same
callable twice gives the same URL.
"""

import contextlib
import datetime
import hashlib
import importlib.metadata
import json
import os
import pickle
import platform
import re
import sys
import threading
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Mapping, Protocol

import cloudpickle
import fsspec
from fsspec.implementations.local import LocalFileSystem

from torchx_datapipes import _modref, _serialcheck, _tpackage
from torchx_datapipes._modref import resolve_spec
from torchx_datapipes.errors import (
    ArtifactError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactVersionError,
    NotSerializableError,
)

__all__ = [
    "BACKENDS",
    "ArtifactRef",
    "check_serializable",
    "is_artifact_url",
    "load",
    "package",
    "resolve_spec",
    "sha256_of_url",
]

BACKENDS = ("cloudpickle", "torch.package", "module")
FORMAT = 1
_MAGIC = b"TXDP-ARTIFACT "
_EXTS = {"cloudpickle": "pkl", "torch.package": "pt", "module": "ref"}
_URL_RE = re.compile(r"([0-9a-f]{64})\.(?:" + "|".join(_EXTS.values()) + ")")
_PICKLE_PROTOCOL = 5
_REGISTRY_LOCK = threading.Lock()


@dataclass(frozen=True)
class ArtifactRef:
    """Where a packaged callable lives and what made it; pass ``url`` and ``sha256`` to the job."""

    url: str
    sha256: str
    backend: str
    python: str
    torch: str
    cloudpickle: str


def _torch_version() -> str:
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:  # loading a cloudpickle artifact should not cost a torch import
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": _torch_version(),
        "cloudpickle": cloudpickle.__version__,
    }


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown artifact backend {backend!r}; valid backends: {', '.join(BACKENDS)}")


# --------------------------------------------------------------------------- backends


class _Backend(Protocol):
    def check(self, obj: Any) -> None: ...
    def checked_dumps(self, obj: Any) -> bytes: ...
    def loads(self, payload: bytes) -> Any: ...
    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> str | None: ...


@contextlib.contextmanager
def _by_value(obj: Any) -> Iterator[None]:
    """Register the user modules ``obj`` depends on for pickling by value, then unregister."""
    with _REGISTRY_LOCK:
        already = set(cloudpickle.list_registry_pickle_by_value())
        added = [m for m in _modref.user_modules(obj) if m != "__main__" and m not in already]
        for name in added:
            cloudpickle.register_pickle_by_value(sys.modules[name])
        try:
            yield
        finally:
            for name in added:
                cloudpickle.unregister_pickle_by_value(sys.modules[name])


def _cloudpickle_dumps(obj: Any) -> bytes:
    return cloudpickle.dumps(obj, protocol=_PICKLE_PROTOCOL)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


class _CloudpickleBackend:
    def check(self, obj: Any) -> None:
        with _by_value(obj):
            _serialcheck.check(obj, _cloudpickle_dumps, "cloudpickle")

    def checked_dumps(self, obj: Any) -> bytes:
        """Pickle once; only when that fails, walk ``obj`` to name the culprit."""
        with _by_value(obj):
            try:
                return _cloudpickle_dumps(obj)
            except Exception as e:
                _serialcheck.check(obj, _cloudpickle_dumps, "cloudpickle")  # raises, naming the path
                raise NotSerializableError(f"cloudpickle failed on {obj!r}: {e}") from e

    def loads(self, payload: bytes) -> Any:
        return pickle.loads(payload)

    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> str | None:
        if _minor(made["python"]) != _minor(here["python"]):
            return (
                f"it was made with Python {made['python']} but this is Python {here['python']};"
                " cloudpickle artifacts hold bytecode, which only the same Python minor version can run"
            )
        if made["cloudpickle"].split(".")[0] != here["cloudpickle"].split(".")[0]:
            return (
                f"it was made with cloudpickle {made['cloudpickle']} but this is"
                f" cloudpickle {here['cloudpickle']}"
            )
        return None


_BACKENDS: dict[str, _Backend] = {
    "cloudpickle": _CloudpickleBackend(),
    "torch.package": _tpackage.TorchPackageBackend(),
    "module": _modref.ModuleBackend(),
}

# --------------------------------------------------------------------------- stores


def _normalize_store(store: str) -> str:
    if not store:
        raise ValueError("artifact store is empty; pass a directory or URL such as s3://bucket/prefix")
    store = store.rstrip("/") or "/"
    return store if "://" in store else os.path.abspath(store)


def _fs(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(url, **dict(storage_options or {}))


def _write_once(url: str, data: bytes, storage_options: Mapping[str, Any] | None) -> None:
    """Write ``data`` unless identical bytes are there; local writes go through a rename."""
    fs, path = _fs(url, storage_options)
    if fs.exists(path) and hashlib.sha256(fs.cat_file(path)).digest() == hashlib.sha256(data).digest():
        return
    if isinstance(fs, LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        fs.pipe_file(tmp, data)
        os.replace(tmp, path)
    else:  # object stores (s3, gcs) make a single PUT atomic; memory:// is in-process
        fs.pipe_file(path, data)


def _describe(obj: Any) -> tuple[str, str]:
    """(qualified name, source module) for the sidecar."""
    if isinstance(obj, str):
        target, attr = _modref.parse_spec(obj)
        return attr, target
    inner = obj.func if hasattr(obj, "func") and hasattr(obj, "keywords") else obj
    named = inner if hasattr(inner, "__qualname__") else type(inner)
    return str(getattr(named, "__qualname__", "?")), str(getattr(named, "__module__", "?"))


def _header(backend: str, versions: Mapping[str, str]) -> bytes:
    fields = {"format": FORMAT, "backend": backend, **versions}
    return _MAGIC + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def _split(data: bytes, url: str) -> tuple[dict[str, Any], bytes]:
    end = data.find(b"\n")
    if not data.startswith(_MAGIC) or end < 0:
        raise ArtifactError(f"{url} is not a torchx_datapipes artifact (no {_MAGIC!r} header); re-package it")
    try:
        header = json.loads(data[len(_MAGIC) : end])
    except ValueError as e:
        raise ArtifactError(f"{url} has a corrupt artifact header: {e}") from e
    if header.get("format") != FORMAT:
        raise ArtifactVersionError(
            f"{url} uses artifact format {header.get('format')!r}; this torchx_datapipes reads format"
            f" {FORMAT}. Re-package the function with this version."
        )
    return header, data[end + 1 :]


# --------------------------------------------------------------------------- public API


def check_serializable(obj: Any, backend: str = "cloudpickle") -> None:
    """Raise :class:`NotSerializableError` naming what in ``obj`` the backend cannot ship.

    The message names the path and type of the deepest culprit, e.g.
    ``clean.__closure__['conn']: socket.socket``, and how to fix it. For ``module``, ``obj``
    is a spec string and must resolve here.
    """
    _check_backend(backend)
    _BACKENDS[backend].check(obj)


def package(
    obj: Any,
    store: str,
    backend: str = "cloudpickle",
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> ArtifactRef:
    """Serialize ``obj`` with ``backend`` into ``{store}/{sha256}.{ext}`` and return its reference.

    Args:
        obj: the callable (``module`` backend: a ``"pkg.module:fn"`` / ``"file.py:fn"`` spec).
        store: a local directory or fsspec URL every rank can read (``s3://bucket/prefix``).
        backend: one of ``BACKENDS``.
        storage_options: passed to fsspec for ``store``.
    """
    _check_backend(backend)
    impl = _BACKENDS[backend]
    versions = _versions()
    data = _header(backend, versions) + impl.checked_dumps(obj)
    digest = hashlib.sha256(data).hexdigest()
    root = _normalize_store(store)
    url = f"{root}/{digest}.{_EXTS[backend]}"
    _write_once(url, data, storage_options)
    qualname, module = _describe(obj)
    ref = ArtifactRef(url=url, sha256=digest, backend=backend, **versions)
    sidecar_url = f"{root}/{digest}.json"
    fs, sidecar = _fs(sidecar_url, storage_options)
    if not fs.exists(sidecar):
        created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        meta = {**asdict(ref), "format": FORMAT, "size": len(data), "created": created}
        meta.update(qualname=qualname, module=module)
        _write_once(sidecar_url, json.dumps(meta, indent=2, sort_keys=True).encode(), storage_options)
    return ref


def _read(url: str, storage_options: Mapping[str, Any] | None) -> bytes:
    try:
        fs, path = _fs(url, storage_options)
        return bytes(fs.cat_file(path))
    except FileNotFoundError as e:
        raise ArtifactNotFoundError(url) from e


def load(url: str, sha256: str | None = None, *, storage_options: Mapping[str, Any] | None = None) -> Any:
    """Fetch, verify and deserialize an artifact written by :func:`package`.

    The sha256 (given, or else the one in a content-addressed basename) is checked before
    anything is unpickled, then the Python/cloudpickle versions recorded in the header.

    Raises:
        ArtifactNotFoundError: nothing at ``url``.
        ArtifactIntegrityError: the bytes do not hash to ``sha256``.
        ArtifactVersionError: the artifact needs another Python / cloudpickle version.
    """
    data = _read(url, storage_options)
    expected = sha256.lower() if sha256 else (sha256_of_url(url) if is_artifact_url(url) else None)
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None and actual != expected:
        raise ArtifactIntegrityError(url, expected, actual)
    header, payload = _split(data, url)
    backend = header.get("backend", "?")
    if backend not in _BACKENDS:
        raise ArtifactVersionError(
            f"{url} uses backend {backend!r}, unknown here; valid: {', '.join(BACKENDS)}"
        )
    impl = _BACKENDS[backend]
    problem = impl.version_problem(header, _versions())
    if problem is not None:
        raise ArtifactVersionError(
            f"cannot load artifact {url}: {problem}. Run the job in an image with the client's versions,"
            " or re-package from an environment that matches the job (backend='torch.package' or"
            " 'module' avoid this)."
        )
    try:
        return impl.loads(payload)
    except ImportError as e:
        raise ArtifactError(
            f"loading {url} needs module {e.name!r}, which is not importable here ({e}); install it in"
            " the job's image, or re-package so the module is shipped with the artifact"
        ) from e


def is_artifact_url(s: str) -> bool:
    """True when ``s`` ends in a basename written by :func:`package`: ``<64 hex>.<ext>``."""
    return _URL_RE.fullmatch(_basename(s)) is not None


def sha256_of_url(url: str) -> str:
    """The sha256 in an artifact URL's basename; ``ValueError`` for other URLs."""
    match = _URL_RE.fullmatch(_basename(url))
    if match is None:
        exts = "|".join(_EXTS.values())
        raise ValueError(f"{url!r} is not an artifact URL: its basename must be <64 hex>.({exts})")
    return match.group(1)


def _basename(s: str) -> str:
    return s.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
