"""Thin fsspec helpers: glob expansion, atomic writes, existence checks."""

import os
import uuid
from typing import Any, List, Tuple

import fsspec
from fsspec.core import url_to_fs

_GLOB_CHARS = "*?["


def fs_and_path(url: str) -> Tuple[Any, str]:
    """The fsspec filesystem and the protocol-less path for ``url``."""
    return url_to_fs(url)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def unstrip(fs: Any, path: str) -> str:
    """A URL for ``path`` on ``fs`` that fsspec can open again in another process."""
    return fs.unstrip_protocol(path) if _protocol(fs) != "file" else path


def _protocol(fs: Any) -> str:
    proto = fs.protocol
    return proto[0] if isinstance(proto, (list, tuple)) else str(proto)


def expand_inputs(patterns: List[str]) -> List[Tuple[str, int]]:
    """Expand globs and comma-separated lists into sorted ``(url, size)`` pairs.

    A pattern with glob characters that matches nothing, or a plain path that does not exist,
    raises ``FileNotFoundError`` naming it.
    """
    out: dict[str, int] = {}
    for pat in patterns:
        fs, path = fs_and_path(pat)
        if any(c in path for c in _GLOB_CHARS):
            matches = sorted(p for p in fs.glob(path) if not fs.isdir(p))
            if not matches:
                raise FileNotFoundError(f"input pattern {pat!r} matched no files; check the path and quoting")
        elif fs.isdir(path):
            matches = sorted(p for p in fs.find(path) if not _hidden(p[len(path) :]))
            if not matches:
                raise FileNotFoundError(f"input directory {pat!r} holds no files")
        elif fs.exists(path):
            matches = [path]
        else:
            raise FileNotFoundError(f"input file {pat!r} does not exist")
        for m in matches:
            out[unstrip(fs, m)] = int(fs.size(m))
    return sorted(out.items())


def _hidden(relpath: str) -> bool:
    """Bookkeeping inside a directory input: any component starting with '_' or '.' (_SUCCESS, _errors/)."""
    return any(part.startswith(("_", ".")) for part in relpath.split("/") if part)


def check_disjoint(inputs: List[Tuple[str, int]], output: str) -> None:
    """Refuse an output directory that holds an input: --overwrite would delete the data."""
    _, out = fs_and_path(output)
    for url, _ in inputs:
        _, path = fs_and_path(url)
        if path == out or path.startswith(out.rstrip("/") + "/"):
            raise ValueError(
                f"input {url} lies inside --output {output}; the job would read its own output (and"
                " --overwrite would delete the input). Choose an output directory outside the inputs"
            )


def split_patterns(value: str) -> List[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def atomic_write(url: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``url``, then rename it into place."""
    fs, path = fs_and_path(url)
    parent = os.path.dirname(path)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}-{os.path.basename(path)}"
    fs.makedirs(parent, exist_ok=True)
    with fs.open(tmp, "wb") as fh:
        fh.write(data)
    fs.mv(tmp, path)


def exists(url: str) -> bool:
    fs, path = fs_and_path(url)
    return bool(fs.exists(path))


def read_bytes(url: str) -> bytes:
    with fsspec.open(url, "rb") as fh:
        return fh.read()  # type: ignore[no-any-return]
