"""Thin fsspec helpers: glob expansion, atomic writes, existence checks."""

import datetime
import os
import posixpath
import re
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import fsspec
from fsspec.core import url_to_fs

from torchx_datapipes.io.layout import is_bookkeeping, tmp_beside

_GLOB_CHARS = "*?["


class InputFile(NamedTuple):
    """One input file as planned: its URL, size in bytes and modification time (-1 if unknown)."""

    url: str
    size: int
    mtime: float


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


def _mtime(info: Dict[str, Any]) -> float:
    """The modification time in an fsspec ``info`` dict (backends name it differently); -1 if none."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "mtime_ns"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
        try:
            return float(value) / (1e9 if key == "mtime_ns" else 1.0)
        except (TypeError, ValueError):
            continue
    return -1.0


def stat(url: str) -> Tuple[int, float]:
    """``(size, mtime)`` of one file now (mtime -1 where the filesystem gives none)."""
    if is_plain_local(url):  # what fsspec's LocalFileSystem.info reports (links followed)
        st = os.stat(os.path.expanduser(url))
        return int(st.st_size), float(st.st_mtime)
    fs, path = fs_and_path(url)
    info = fs.info(path)
    return int(info["size"]), _mtime(info)


def expand_inputs(patterns: List[str]) -> List[Tuple[str, int]]:
    """Expand globs and comma-separated lists into sorted ``(url, size)`` pairs.

    A pattern with glob characters that matches nothing, or a plain path that does not exist,
    raises ``FileNotFoundError`` naming it.
    """
    return [(f.url, f.size) for f in expand_input_files(patterns)]


def expand_input_files(patterns: List[str]) -> List[InputFile]:
    """Like :func:`expand_inputs`, with each file's modification time as planned.

    A pattern with glob characters that names an existing file or directory as it is written
    (``data/[x].jsonl`` when that file exists) is that path, not a glob.
    """
    out: Dict[str, InputFile] = {}
    for pat in patterns:
        fs, path = fs_and_path(pat)
        if any(c in path for c in _GLOB_CHARS) and not fs.exists(path):  # an existing literal name wins
            matches = sorted(p for p in fs.glob(path) if not fs.isdir(p))
            if not matches:
                raise FileNotFoundError(f"input pattern {pat!r} matched no files; check the path and quoting")
        elif fs.isdir(path):
            found = _walk_local(path) if _protocol(fs) == "file" else fs.find(path)
            matches = sorted(p for p in found if not _hidden(p[len(path) :]))
            if not matches:
                raise FileNotFoundError(f"input directory {pat!r} holds no files")
        elif fs.exists(path):
            matches = [path]
        else:
            raise FileNotFoundError(f"input file {pat!r} does not exist")
        local = _protocol(fs) == "file"
        for m in matches:
            url = unstrip(fs, m)
            if local:
                out[url] = InputFile(url, *stat(m))
                continue
            info = fs.info(m)
            out[url] = InputFile(url, int(info["size"]), _mtime(info))
    return [out[k] for k in sorted(out)]


def _walk_local(root: str) -> List[str]:
    """Files under a local directory; symlinked directories are followed once, a loop is skipped."""
    files: List[str] = []
    seen = {os.path.realpath(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        keep = []
        for d in dirnames:
            full = os.path.join(dirpath, d)
            real = os.path.realpath(full)
            if real in seen:
                warnings.warn(
                    f"input directory {root}: {full} links back to {real}, already read; skipping it"
                    " (a symlink loop or a second link to the same directory)",
                    stacklevel=3,
                )
                continue
            seen.add(real)
            keep.append(d)
        dirnames[:] = sorted(keep)
        for f in filenames:
            full = os.path.join(dirpath, f)
            if os.path.isfile(full):  # a dangling link, a socket or a fifo is not an input file
                files.append(full)
            else:
                warnings.warn(f"input directory {root}: skipping {full}, not a regular file", stacklevel=3)
    return files


def _hidden(relpath: str) -> bool:
    """Bookkeeping inside a directory input: any component starting with '_' or '.' (_SUCCESS, _errors/)."""
    return any(is_bookkeeping(part) for part in relpath.split("/") if part)


def is_plain_local(url: str) -> bool:
    """A local path without a protocol or chaining: fsspec would only make it absolute.

    Per-file work on such paths (stat, open, resolve) skips fsspec, which costs ~100 us a call
    in URL parsing: a second per 10,000 files (issue 10's images benchmark).
    """
    return "://" not in url and "::" not in url


def _realpath(path: str, dirs: Optional[Dict[str, str]] = None) -> str:
    """``os.path.realpath``, resolving each parent directory once when ``dirs`` (a cache) is given."""
    path = os.path.expanduser(path)
    if dirs is None or ".." in path.split(os.sep) or os.path.islink(path):
        return os.path.realpath(path)
    parent, base = os.path.split(os.path.abspath(path))
    if parent not in dirs:
        dirs[parent] = os.path.realpath(parent)
    return os.path.join(dirs[parent], base)


def normalize(url: str, dirs: Optional[Dict[str, str]] = None) -> Tuple[str, str]:
    """``(protocol, path)`` with ``.``, ``..``, ``//`` and (for local paths) symlinks resolved.

    ``dirs`` caches resolved parent directories across the calls of one check.
    """
    if is_plain_local(url):
        return "file", _realpath(url, dirs)
    fs, path = fs_and_path(url)
    proto = _protocol(fs)
    if proto == "file":
        return proto, os.path.realpath(path)
    return proto, posixpath.normpath("/" + path).lstrip("/")


def _root(pattern: str) -> Tuple[str, str, bool]:
    """The normalised directory or file a pattern names, and whether it was a glob (then its fixed prefix)."""
    fs, path = fs_and_path(pattern)
    cut = min((path.index(c) for c in _GLOB_CHARS if c in path), default=-1)
    if cut < 0 or (_protocol(fs) == "file" and os.path.lexists(path)):  # an existing literal name wins
        return (*normalize(pattern), False)
    prefix = path[:cut].rsplit("/", 1)[0] if "/" in path[:cut] else "."
    proto = _protocol(fs)
    if proto == "file":
        return proto, os.path.realpath(prefix), True
    return proto, posixpath.normpath("/" + prefix).lstrip("/"), True


def _within(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def check_disjoint(inputs: Sequence[Tuple[str, int]], output: str, patterns: Sequence[str] = ()) -> None:
    """Refuse an output that overlaps an input, in either direction, after resolving both sides.

    ``inputs`` are expanded files (each resolved, so a symlink to an input counts); ``patterns``
    are what the user passed: a directory input must not contain the output, and no input
    directory (or a glob's fixed prefix) may lie inside the output, since ``--overwrite``
    deletes the output and a job writes its parts there.
    """
    out_proto, out = normalize(output)
    fix = "choose an --output outside every input (e.g. a sibling directory)"
    dirs: Dict[str, str] = {}
    for url, _ in inputs:
        proto, path = normalize(url, dirs)
        if proto == out_proto and (_within(path, out) or _within(out, path)):
            where = "is" if path == out else "lies inside" if _within(path, out) else "contains"
            raise ValueError(
                f"input file {url} (resolved: {path}) {where} --output {output} (resolved: {out}); the"
                f" job would write into its input and --overwrite would delete it; {fix}"
            )
    for pat in patterns:
        proto, root, is_glob = _root(pat)
        if proto != out_proto:
            continue
        if _within(root, out):
            raise ValueError(
                f"input {pat} (resolved: {root}) lies inside --output {output} (resolved: {out});"
                f" --overwrite would delete the input and the job's parts would mix with it; {fix}"
            )
        if not is_glob and _within(out, root):
            raise ValueError(
                f"--output {output} (resolved: {out}) lies inside input directory {pat} (resolved:"
                f" {root}); the job would write its parts into its own input; {fix}"
            )


def check_io_disjoint(patterns: Sequence[str], output: str) -> List[InputFile]:
    """The client-side check: local inputs expanded and resolved, remote ones by their roots (no listing).

    Returns the expanded local input files, so the other client checks need not list them again.
    """
    local = [p for p in patterns if not _is_remote(p)]
    files = expand_input_files(local) if local else []
    check_disjoint([(f.url, f.size) for f in files], output, patterns)
    return files


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def split_patterns(value: str) -> List[str]:
    """``--input``'s comma-separated list; ``\\,`` is a comma inside a name (``a\\,b.jsonl`` is one file).

    Any other backslash is kept as it is.
    """
    parts = re.split(r"(?<!\\),", value)
    return [p.replace("\\,", ",").strip() for p in parts if p.strip()]


def join_patterns(patterns: Sequence[str]) -> str:
    """The inverse of :func:`split_patterns`: commas inside names escaped as ``\\,``."""
    return ",".join(p.replace(",", "\\,") for p in patterns)


def atomic_write(url: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``url``, then rename it into place."""
    fs, path = fs_and_path(url)
    parent = os.path.dirname(path)
    tmp = tmp_beside(path)
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
