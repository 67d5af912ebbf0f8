"""Ship the user's transform to the job: package it on the client, load it on every rank.

``package(fn, store)`` writes content-addressed bytes to ``{store}/{sha256}.{ext}`` (any
fsspec URL or a local path) plus a ``{sha256}.json`` sidecar for people, and returns an
:class:`ArtifactRef`. ``load(url, sha256)`` verifies the hash, then the versions, and only
then deserializes. Three backends (``BACKENDS``), one module each:

* ``cloudpickle`` (default, :mod:`.cloudpickle_backend`): everything a user can write --
  lambdas, closures, partials, callable objects, ``__main__``/notebook code. The user's own
  modules are pickled by value, installed ones (:mod:`.modules`) by reference. Bytecode:
  load with the same Python minor version.
* ``torch.package`` (:mod:`.tpackage_backend`): user module *sources* interned in a zip;
  hermetic, survives Python upgrades, but only module-level functions/classes.
* ``module`` (:mod:`.module_backend`): a reference ``"pkg.module:fn"`` /
  ``"path/to/file.py:fn"`` resolved on the runner, pinned to the sha256 of the code it
  names; nothing is pickled, the code must be in the job's workspace or image.

Also: :mod:`.store` (URLs, write-once files, header), :mod:`.serialcheck` (naming what
cannot be pickled), :mod:`.size` (the large-artifact warning), :mod:`.gc` (cleaning a
store; ``python -m torchx_datapipes.artifact gc --store DIR --keep-days N``).

Non-goals: long-term storage of cloudpickle artifacts (re-package after an upgrade), and
safety against a hostile store -- loading an artifact runs its code, so pin the sha256.
See ``docs/serialization.md`` for the measured comparison.
"""

import contextlib
import datetime
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Optional, Protocol

from torchx_datapipes.artifact import size as _size
from torchx_datapipes.artifact import store as _store
from torchx_datapipes.artifact.cloudpickle_backend import CloudpickleBackend, by_value
from torchx_datapipes.artifact.cloudpickle_backend import dumps as _cloudpickle_dumps
from torchx_datapipes.artifact.module_backend import ModuleBackend, parse_spec, resolve_spec
from torchx_datapipes.artifact.store import is_artifact_url, sha256_of_url
from torchx_datapipes.artifact.tpackage_backend import TorchPackageBackend, pickle_dumps
from torchx_datapipes.errors import ArtifactError as ArtifactError
from torchx_datapipes.errors import ArtifactIntegrityError, ArtifactVersionError
from torchx_datapipes.errors import ArtifactNotFoundError as ArtifactNotFoundError
from torchx_datapipes.errors import NotSerializableError as NotSerializableError

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
FORMAT = _store.FORMAT


@dataclass(frozen=True)
class ArtifactRef:
    """Where a packaged callable lives and what made it; pass ``url`` and ``sha256`` to the job."""

    url: str
    sha256: str
    backend: str
    python: str
    torch: str
    cloudpickle: str


class _Backend(Protocol):
    def check(self, obj: Any) -> None: ...
    def checked_dumps(self, obj: Any) -> bytes: ...
    def loads(self, payload: bytes) -> Any: ...
    def version_problem(self, made: Mapping[str, str], here: Mapping[str, str]) -> Optional[str]: ...


_BACKENDS: dict[str, _Backend] = {
    "cloudpickle": CloudpickleBackend(),
    "torch.package": TorchPackageBackend(),
    "module": ModuleBackend(),
}


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"unknown artifact backend {backend!r}; valid backends: {', '.join(BACKENDS)}")


def _describe(obj: Any) -> tuple[str, str]:
    """(qualified name, source module) for the sidecar."""
    if isinstance(obj, str):
        target, attr = parse_spec(obj)
        return attr, target
    inner = obj.func if hasattr(obj, "func") and hasattr(obj, "keywords") else obj
    named = inner if hasattr(inner, "__qualname__") else type(inner)
    return str(getattr(named, "__qualname__", "?")), str(getattr(named, "__module__", "?"))


def _write_sidecar(url: str, fields: Mapping[str, Any], storage_options: Optional[Mapping[str, Any]]) -> None:
    """Write ``{sha256}.json``: ``created`` (first packaged) and ``packaged`` (last, to the day).

    ``gc`` ages an artifact by ``packaged``, so one that jobs still package is kept; the
    sidecar is rewritten at most once a day per artifact.
    """
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    fs, path = _store.fs_of(url, storage_options)
    old: dict[str, Any] = {}
    if fs.exists(path):
        try:
            old = dict(json.loads(fs.cat_file(path)))
        except (ValueError, TypeError):
            old = {}  # unreadable: rewrite it
        if str(old.get("packaged", old.get("created", "")))[:10] == now[:10]:
            return
    meta = {**fields, "created": old.get("created", now), "packaged": now}
    _store.write_once(url, json.dumps(meta, indent=2, sort_keys=True).encode(), storage_options)


def _warn_if_large(obj: Any, backend: str, url: str, nbytes: int, warn_mb: Optional[float]) -> None:
    limit = _size.limit_mb(warn_mb)
    if limit <= 0 or nbytes <= limit * 1e6:
        return
    dumps: Optional[Callable[[Any], bytes]] = None
    if backend == "cloudpickle":
        dumps = _cloudpickle_dumps
    elif backend == "torch.package":
        dumps = pickle_dumps
    with by_value(obj) if backend == "cloudpickle" else contextlib.nullcontext():
        _size.warn_if_large(obj, url, nbytes, limit, dumps)


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
    storage_options: Optional[Mapping[str, Any]] = None,
    warn_mb: Optional[float] = None,
    upload: bool = True,
    before_upload: Optional[Callable[[ArtifactRef, int], None]] = None,
) -> ArtifactRef:
    """Serialize ``obj`` with ``backend`` into ``{store}/{sha256}.{ext}`` and return its reference.

    Args:
        obj: the callable (``module`` backend: a ``"pkg.module:fn"`` / ``"file.py:fn"`` spec).
        store: a local directory or fsspec URL every rank can read (``s3://bucket/prefix``).
        backend: one of ``BACKENDS``.
        storage_options: passed to fsspec for ``store``.
        warn_mb: warn (``UserWarning``) when the artifact is larger than this many MB; default
            ``$TXDP_ARTIFACT_WARN_MB`` or 10; 0 never warns.
        upload: ``False`` serializes and hashes only (the reference of a dry run); nothing is written.
        before_upload: called with the reference and the size in bytes before anything is written.
    """
    _check_backend(backend)
    impl = _BACKENDS[backend]
    vers = _store.versions()
    data = _store.header(backend, vers) + impl.checked_dumps(obj)
    digest = hashlib.sha256(data).hexdigest()
    root = _store.normalize_store(store)
    url = f"{root}/{digest}.{_store.EXTS[backend]}"
    ref = ArtifactRef(url=url, sha256=digest, backend=backend, **vers)
    if before_upload is not None:
        before_upload(ref, len(data))
    if not upload:
        return ref
    _store.write_once(url, data, storage_options)
    qualname, module = _describe(obj)
    fields = {**asdict(ref), "format": FORMAT, "size": len(data), "qualname": qualname, "module": module}
    _write_sidecar(f"{root}/{digest}.{_store.SIDECAR_EXT}", fields, storage_options)
    _warn_if_large(obj, backend, url, len(data), warn_mb)
    return ref


def load(
    url: str, sha256: Optional[str] = None, *, storage_options: Optional[Mapping[str, Any]] = None
) -> Any:
    """Fetch, verify and deserialize an artifact written by :func:`package`.

    The sha256 (given, or else the one in a content-addressed basename) is checked before
    anything is unpickled, then the Python/cloudpickle versions recorded in the header.

    Raises:
        ArtifactNotFoundError: nothing at ``url``.
        ArtifactIntegrityError: the bytes do not hash to ``sha256``.
        ArtifactVersionError: the artifact needs another Python / cloudpickle version.
        ArtifactError: a ``module`` artifact whose code changed since it was packaged.
    """
    data = _store.read(url, storage_options)
    expected = sha256.lower() if sha256 else (sha256_of_url(url) if is_artifact_url(url) else None)
    actual = hashlib.sha256(data).hexdigest()
    if expected is not None and actual != expected:
        raise ArtifactIntegrityError(url, expected, actual)
    header, payload = _store.split(data, url)
    backend = header.get("backend", "?")
    if backend not in _BACKENDS:
        raise ArtifactVersionError(
            f"{url} uses backend {backend!r}, unknown here; valid: {', '.join(BACKENDS)}"
        )
    impl = _BACKENDS[backend]
    problem = impl.version_problem(header, _store.versions())
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
