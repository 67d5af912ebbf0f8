"""Sizes and checksums of the files a unit commits, so resume and the commit can trust them.

Every file an op writes for a unit (parts, ``_errors/`` parts, stats partials, split hash
files) is hashed while it is written (xxh3_128: fast, and plenty to detect a truncated,
replaced or garbage file; it is not a defence against tampering). The unit's commit record
lists ``{"path", "size", "xxh3_128"}`` for each (``io/manifest_schema.py``), with paths relative
to the output, and a committed unit is skipped on resume only if every file still matches.
"""

import errno
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import xxhash

from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.blocksums import BlockHasher
from torchx_datapipes.io.fs import fs_and_path, join
from torchx_datapipes.io.layout import tmp_beside

ALGO = ms.FILE_XXH3  # the checksum, named by its commit record key
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileSum:
    path: str  # relative to the output directory
    size: int
    xxh3_128: str

    def to_json(self) -> Dict[str, Any]:
        return {ms.FILE_PATH: self.path, ms.FILE_SIZE: self.size, ms.FILE_XXH3: self.xxh3_128}


def located(e: OSError, url: str) -> OSError:
    """``e`` again, with the path being written in its message (ENOSPC alone names nothing)."""
    why = e.strerror or os.strerror(e.errno) if e.errno else str(e)
    return OSError(e.errno or errno.EIO, f"{why} while writing {url}")


class SummingFile:
    """A write-only file handle wrapper that counts bytes and hashes them as they pass.

    The whole file's xxh3_128, and (``blocks``) each 64 KiB block's xxh3_64 for readers that
    verify what they read (io/blocksums.py).
    """

    def __init__(self, fh: Any, url: str) -> None:
        self.fh, self.url = fh, url
        self.size = 0
        self._h = xxhash.xxh3_128()
        self.blocks = BlockHasher()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        try:
            n = self.fh.write(view)
        except OSError as e:
            raise located(e, self.url) from e
        self._h.update(view)
        self.blocks.update(view)
        self.size += len(view)
        return int(n) if n is not None else len(view)

    def flush(self) -> None:
        self.fh.flush()

    def tell(self) -> int:
        return self.size

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return bool(self.fh.closed)

    def close(self) -> None:
        try:
            self.fh.close()
        except OSError as e:
            raise located(e, self.url) from e

    def hexdigest(self) -> str:
        return str(self._h.hexdigest())


def sum_bytes(data: bytes) -> str:
    return str(xxhash.xxh3_128_hexdigest(data))


def rel_to(output: str, url: str) -> str:
    """``url`` relative to ``output`` (both as written by the runner)."""
    base = output.rstrip("/") + "/"
    return url[len(base) :] if url.startswith(base) else url


def write_file(url: str, data: bytes) -> None:
    """Atomically write ``url`` (temp name, then rename); on any failure no temp file is left.

    An OSError (ENOSPC, EDQUOT, ...) names ``url``.
    """
    fs, path = fs_and_path(url)
    parent = os.path.dirname(path)
    tmp = tmp_beside(path)
    try:
        fs.makedirs(parent, exist_ok=True)
        with fs.open(tmp, "wb") as fh:
            fh.write(data)
        fs.mv(tmp, path)
    except OSError as e:
        _discard(fs, tmp)
        raise located(e, url) from e
    except BaseException:
        _discard(fs, tmp)
        raise


def write_summed(output: str, rel: str, data: bytes) -> FileSum:
    """:func:`write_file` ``OUT/rel`` and return its size and checksum for the commit record."""
    write_file(join(output, rel), data)
    return FileSum(rel, len(data), sum_bytes(data))


def _discard(fs: Any, tmp: str) -> None:
    try:
        if fs.exists(tmp):
            fs.rm(tmp)
    except OSError:
        pass


def verify(output: str, files: Sequence[Dict[str, Any]], full: bool = True) -> Optional[str]:
    """Why the committed ``files`` cannot be trusted (missing, wrong size, wrong checksum), or None."""
    for f in files:
        url = join(output, f[ms.FILE_PATH])
        fs, path = fs_and_path(url)
        try:
            size = int(fs.size(path))
        except FileNotFoundError:
            return f"{url} is missing"
        if size != int(f[ms.FILE_SIZE]):
            return f"{url} has {size} bytes, the commit record says {f[ms.FILE_SIZE]}"
        if full and file_digest(fs, path) != f[ms.FILE_XXH3]:
            return f"{url} does not match its {ALGO} checksum {f[ms.FILE_XXH3]}"
    return None


def verify_sizes(output: str, files: Sequence[Dict[str, Any]]) -> List[str]:
    """Problems with the presence and size of ``files``, from one detailed listing of the output."""
    fs, root = fs_and_path(output)
    listing = {p: int(info.get("size") or 0) for p, info in fs.find(root, detail=True).items()}
    problems = []
    for f in files:
        _, path = fs_and_path(join(output, f[ms.FILE_PATH]))
        if path not in listing:
            problems.append(f"{join(output, f[ms.FILE_PATH])} is missing")
        elif listing[path] != int(f[ms.FILE_SIZE]):
            problems.append(
                f"{join(output, f[ms.FILE_PATH])} has {listing[path]} bytes, expected {f[ms.FILE_SIZE]}"
            )
    return problems


def file_digest(fs: Any, path: str) -> str:
    h = xxhash.xxh3_128()
    with fs.open(path, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
    return str(h.hexdigest())
