"""Opening a file the manifest lists: inside the output only (symlinks followed on local disks)."""

import os
from typing import Any, Mapping, Optional, Tuple

from fsspec.core import url_to_fs

from torchx_datapipes.io.part import OutsideOutputError


def _fs(url: str, storage_options: Optional[Mapping[str, Any]]) -> Tuple[Any, str]:
    return url_to_fs(url, **dict(storage_options or {}))


def read_small(url: str, storage_options: Optional[Mapping[str, Any]], root: Optional[str] = None) -> bytes:
    """A small file's bytes; with ``root``, a manifest-listed file that must stay inside the output."""
    fs, path = _fs(url, storage_options)
    if root is not None:
        check_inside(fs, path, url, root, storage_options)
    with fs.open(path, "rb") as f:
        data: bytes = f.read()
    return data


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def check_inside(
    fs: Any, path: str, url: str, root: str, storage_options: Optional[Mapping[str, Any]]
) -> None:
    """On a local filesystem, ``path`` resolved (symlinks followed) must be inside the output ``root``."""
    if not _is_local(fs):
        return
    _, root_path = _fs(root, storage_options)
    real, base = os.path.realpath(path), os.path.realpath(root_path)
    if os.path.commonpath([real, base]) != base:
        raise OutsideOutputError(
            f"{url} (listed in {root}/_SUCCESS) resolves to {real}, outside the output directory"
            f" {base}: a symlink leads out of the output, and this reader only reads files inside it."
            " Replace the symlink by the file, or re-run the job with --overwrite True"
        )
