"""Opening parts: size check against the manifest, optional local copies, byte ranges.

No filesystem object is kept in a dataset's state: fsspec caches instances per process (and
per set of options), so each DataLoader worker gets its own after a fork or spawn.
"""

import hashlib
import os
import shutil
import uuid
from typing import IO, Any, Dict, List, Mapping, Optional, Set, Tuple, cast

import numpy as np

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.confine import _fs, check_inside
from torchx_datapipes.io.part import Part

# (url, size) pairs whose size was checked in this process: a check costs one stat per part
_CHECKED: Set[Tuple[str, int]] = set()


class PartSizeError(DatapipesError, ValueError):
    """A part's size differs from the size its commit recorded."""

    def __init__(self, url: str, expected: int, actual: int) -> None:
        self.url, self.expected, self.actual = url, expected, actual
        super().__init__(
            f"{url} is {actual} bytes but the manifest (_SUCCESS) recorded {expected}: the part was"
            " modified or truncated after the commit; rerun the job that wrote it"
        )

    def __reduce__(self) -> Any:
        return (type(self), (self.url, self.expected, self.actual))


def _check_size(part: Part, url: str, storage_options: Optional[Mapping[str, Any]]) -> None:
    if (url, part.size) in _CHECKED:
        return
    fs, path = _fs(url, storage_options)
    if url == part.url and part.root:
        check_inside(fs, path, url, part.root, storage_options)
    try:
        actual = int(fs.size(path))
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{url} is listed in the manifest but does not exist: the output was modified after"
            " its commit; rerun the job"
        ) from e
    if actual != part.size:
        raise PartSizeError(url, part.size, actual)
    _CHECKED.add((url, part.size))


def _cached_copy(part: Part, cache_dir: str, storage_options: Optional[Mapping[str, Any]]) -> str:
    digest = hashlib.sha256(part.url.encode()).hexdigest()[:16]
    local = os.path.join(cache_dir, digest, os.path.basename(part.path))
    if os.path.exists(local) and os.path.getsize(local) == part.size:
        return local
    os.makedirs(os.path.dirname(local), exist_ok=True)
    tmp = f"{local}.tmp-{uuid.uuid4().hex}"
    fs, path = _fs(part.url, storage_options)
    try:
        with fs.open(path, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)
        if os.path.getsize(tmp) != part.size:
            raise PartSizeError(part.url, part.size, os.path.getsize(tmp))
        os.replace(tmp, local)  # atomic: a reader never sees a half-copied part
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return local


def local_or_remote(
    part: Part, storage_options: Optional[Mapping[str, Any]], cache_dir: Optional[str]
) -> str:
    """The URL to read ``part`` from (a checked local copy under ``cache_dir`` if given)."""
    _check_size(part, part.url, storage_options)
    if cache_dir is None:
        return part.url
    local = _cached_copy(part, cache_dir, storage_options)
    _check_size(part, local, None)
    return local


def open_part(
    part: Part,
    storage_options: Optional[Mapping[str, Any]],
    cache_dir: Optional[str],
    zero_copy: bool = False,
) -> IO[bytes]:
    """The part, open for reading through its checksums (``_verify.py``): a changed byte is an error.

    ``zero_copy``: widened reads return memoryviews of the fetched bytes, not copies (for pyarrow).
    """
    from torchx_datapipes.io import verify as _verify

    url = local_or_remote(part, storage_options, cache_dir)
    fs, path = _fs(url, storage_options if url == part.url else None)
    raw = fs.open(path, "rb")
    try:
        f: IO[bytes] = _verify.wrap(part, raw, storage_options, zero_copy, url)
    except BaseException:
        raw.close()
        raise
    return f


def read_ranges(
    part: Part,
    ranges: Dict[int, Tuple[int, int]],
    storage_options: Optional[Mapping[str, Any]],
    cache_dir: Optional[str],
) -> Dict[int, bytes]:
    """``{key: bytes[start:end]}`` of one part, read with one open."""
    out: Dict[int, bytes] = {}
    with open_part(part, storage_options, cache_dir) as f:
        items = sorted(ranges.items(), key=lambda kv: kv[1])
        read_arrays = getattr(f, "read_arrays", None)
        if read_arrays is not None:  # verified: each block under the ranges read and hashed once
            arrays = read_arrays([r for _, r in items])
            return {key: arr.tobytes() for (key, _), arr in zip(items, arrays)}
        for key, (start, end) in items:
            f.seek(start)
            out[key] = f.read(end - start)
    return out


def read_into(
    part: Part,
    ranges: List[Tuple[int, int]],
    storage_options: Optional[Mapping[str, Any]],
    cache_dir: Optional[str],
) -> List[np.ndarray]:
    """A fresh uint8 array per ``[start, end)`` of ``ranges`` (increasing), read with one open.

    Callers keep the ranges small (about 1 MB): a read into a buffer the CPU cache holds is
    several times faster than one large read (which also page-faults a fresh allocation), and
    ``np.empty`` is not zero-filled as a ``bytearray`` is.
    """
    out: List[np.ndarray] = []
    with open_part(part, storage_options, cache_dir) as f:
        read_arrays = getattr(f, "read_arrays", None)
        if read_arrays is not None:  # verified: each block under the ranges read and hashed once
            return cast(List[np.ndarray], read_arrays(ranges))
        readinto, pos = cast(Any, f).readinto, -1
        for start, end in ranges:
            buf = np.empty(end - start, np.uint8)
            if end > start:
                if pos != start:
                    f.seek(start)
                view, got = buf.data, 0
                while got < len(buf):
                    n = readinto(view[got:])
                    if not n:
                        raise EOFError(f"{part.url} ended at byte {start + got}, before {end}")
                    got += n
                pos = end
            out.append(buf)
    return out
