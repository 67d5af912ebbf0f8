"""Where artifacts live: store URLs, write-once content-addressed files, the header, integrity.

File layout: a header line ``TXDP-ARTIFACT {json}\\n`` (format, backend, versions) then the
payload. The versions travel inside the hashed bytes, so a copied artifact is still
checked before anything is unpickled, and no timestamp is hashed, so packaging the same
callable twice gives the same URL. Beside each ``{sha256}.{ext}`` a ``{sha256}.json``
sidecar (for people and for :mod:`.gc`) records what made it and when.
"""

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import sys
import threading
from typing import Any, Mapping, Optional

import cloudpickle
import fsspec
from fsspec.implementations.local import LocalFileSystem

from torchx_datapipes.errors import ArtifactError, ArtifactNotFoundError, ArtifactVersionError

FORMAT = 1
MAGIC = b"TXDP-ARTIFACT "
EXTS = {"cloudpickle": "pkl", "torch.package": "pt", "module": "ref"}
SIDECAR_EXT = "json"
URL_RE = re.compile(r"([0-9a-f]{64})\.(?:" + "|".join(EXTS.values()) + ")")


def torch_version() -> str:
    torch = sys.modules.get("torch")
    if torch is not None:
        return str(torch.__version__)
    try:  # loading a cloudpickle artifact should not cost a torch import
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch_version(),
        "cloudpickle": cloudpickle.__version__,
    }


def normalize_store(store: str) -> str:
    if not store:
        raise ValueError("artifact store is empty; pass a directory or URL such as s3://bucket/prefix")
    store = store.rstrip("/") or "/"
    return store if "://" in store else os.path.abspath(store)


def fs_of(url: str, storage_options: Optional[Mapping[str, Any]]) -> tuple[Any, str]:
    return fsspec.core.url_to_fs(url, **dict(storage_options or {}))


def write_once(url: str, data: bytes, storage_options: Optional[Mapping[str, Any]]) -> None:
    """Write ``data`` unless identical bytes are there; local writes go through a rename."""
    fs, path = fs_of(url, storage_options)
    if fs.exists(path) and hashlib.sha256(fs.cat_file(path)).digest() == hashlib.sha256(data).digest():
        return
    if isinstance(fs, LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        fs.pipe_file(tmp, data)
        os.replace(tmp, path)
    else:  # object stores (s3, gcs) make a single PUT atomic; memory:// is in-process
        fs.pipe_file(path, data)


def read(url: str, storage_options: Optional[Mapping[str, Any]]) -> bytes:
    try:
        fs, path = fs_of(url, storage_options)
        return bytes(fs.cat_file(path))
    except FileNotFoundError as e:
        raise ArtifactNotFoundError(url) from e


def header(backend: str, vers: Mapping[str, str]) -> bytes:
    fields = {"format": FORMAT, "backend": backend, **vers}
    return MAGIC + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def split(data: bytes, url: str) -> tuple[dict[str, Any], bytes]:
    """``(header fields, payload)``; :class:`ArtifactError` for bytes that are not an artifact."""
    end = data.find(b"\n")
    if not data.startswith(MAGIC) or end < 0:
        raise ArtifactError(f"{url} is not a torchx_datapipes artifact (no {MAGIC!r} header); re-package it")
    try:
        fields = json.loads(data[len(MAGIC) : end])
    except ValueError as e:
        raise ArtifactError(f"{url} has a corrupt artifact header: {e}") from e
    if fields.get("format") != FORMAT:
        raise ArtifactVersionError(
            f"{url} uses artifact format {fields.get('format')!r}; this torchx_datapipes reads format"
            f" {FORMAT}. Re-package the function with this version."
        )
    return fields, data[end + 1 :]


def basename(s: str) -> str:
    return s.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def is_artifact_url(s: str) -> bool:
    """True when ``s`` ends in a basename written by ``package``: ``<64 hex>.<ext>``."""
    return URL_RE.fullmatch(basename(s)) is not None


def sha256_of_url(url: str) -> str:
    """The sha256 in an artifact URL's basename; ``ValueError`` for other URLs."""
    match = URL_RE.fullmatch(basename(url))
    if match is None:
        exts = "|".join(EXTS.values())
        raise ValueError(f"{url!r} is not an artifact URL: its basename must be <64 hex>.({exts})")
    return match.group(1)
