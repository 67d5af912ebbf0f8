"""Parts are read only through checksums: no byte of a part is decoded before it is verified.

Every part has block checksums committed beside it (``_index/part-NNNNN.<ext>.sums``,
``io/blocksums.py``; itself checked against the manifest's xxh3_128 when first loaded). A part is
opened as a :class:`VerifiedFile`: each read is widened to whole blocks, the blocks are hashed
(xxh3_64, ~10 GB/s) and compared, and only then are the bytes asked for returned, so a chunk
(row group, tar piece, run of lines) whose bytes changed after the commit raises
:class:`PartModifiedError` before any of its records is decoded. Several ranges read at once
(:meth:`VerifiedFile.read_arrays`: a tar chunk's pieces, map-style runs of rows) read and hash
each block under them once, however many ranges share it.

An output written before block checksums existed has none: its parts are checked whole against
the manifest's xxh3_128 when first opened in a process (one extra read of the part), with a
warning once per output.

``VERIFY`` (module switch, for the benchmark's "verification off" row only) skips both checks.
"""

import io
import warnings
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np
import xxhash

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io import blocksums
from torchx_datapipes.io.confine import read_small
from torchx_datapipes.io.part import Part

VERIFY = True
# read_arrays reads at most this many blocks at once (a ~1 MB tar piece in one), then hashes them
STEP_BLOCKS = 32
_SUMS: Dict[Tuple[str, int], Tuple[int, bytes]] = {}  # (part url, size) -> (block, digests)
_WHOLE_OK: Set[Tuple[str, int]] = set()  # legacy parts whose whole checksum matched in this process
_WARNED: Set[str] = set()
FIX = "Re-run the job with --overwrite True to rewrite the output, or restore the part from a copy"


class PartModifiedError(DatapipesError, ValueError):
    """A part's bytes differ from those its commit recorded (no record of them is served)."""


def _modified(part: Part, what: str) -> PartModifiedError:
    return PartModifiedError(
        f"{part.url}: {what}: the part was modified after the job committed it, so its records are"
        f" not served. {FIX}"
    )


def _load_sums(part: Part, storage_options: Any) -> Tuple[int, bytes]:
    key = (part.url, part.size)
    if key not in _SUMS:
        from torchx_datapipes.io.checksum import sum_bytes

        assert part.sums is not None
        url, size, digest = part.sums
        try:
            data = read_small(url, storage_options, part.root)
        except FileNotFoundError as e:
            raise _modified(part, f"its block checksums {url} (listed in _SUCCESS) are missing") from e
        if len(data) != size or sum_bytes(data) != digest:
            raise _modified(
                part,
                f"its block checksums {url} are {len(data)} bytes with xxh3_128 {sum_bytes(data)},"
                f" _SUCCESS recorded {size} bytes with {digest}",
            )
        try:
            _SUMS[key] = blocksums.decode(data, part.size)
        except ValueError as e:
            raise _modified(part, f"its block checksums {url} do not describe it ({e})") from e
    return _SUMS[key]


def _check_whole(part: Part, raw: Any) -> None:
    """A part without block sums: its whole xxh3_128 against the manifest's, once per process."""
    key = (part.url, part.size)
    if key in _WHOLE_OK:
        return
    if part.root not in _WARNED:
        _WARNED.add(part.root)
        warnings.warn(
            f"{part.root} was written without per-block checksums (by an older torchx_datapipes):"
            " each part is verified whole against _SUCCESS when first opened in a process, one extra"
            " read of it. Re-run the job with --overwrite True to get per-block verification",
            stacklevel=4,
        )
    if not part.xxh3_128:
        raise _modified(part, "_SUCCESS records no xxh3_128 for it, so it cannot be verified")
    h = xxhash.xxh3_128()
    while True:
        block = raw.read(8 << 20)
        if not block:
            break
        h.update(block)
    raw.seek(0)
    if h.hexdigest() != part.xxh3_128:
        raise _modified(part, f"its xxh3_128 is {h.hexdigest()}, _SUCCESS recorded {part.xxh3_128}")
    _WHOLE_OK.add(key)


def wrap(part: Part, raw: Any, storage_options: Any, zero_copy: bool = False, source: str = "") -> Any:
    """``raw`` (an open part) as a :class:`VerifiedFile`, or checked whole (no block sums)."""
    if not VERIFY:
        return raw
    if part.sums is None:
        _check_whole(part, raw)
        return raw
    block, digests = _load_sums(part, storage_options)
    return VerifiedFile(part, raw, block, digests, zero_copy, source)


class VerifiedFile(io.RawIOBase):
    """A read-only, seekable view of an open part whose every read is verified block by block.

    Reads (``read``, ``read_array``) fetch whole blocks: at most a block before and after the
    range asked for. The last verified fetch is held, so small reads within it (Parquet footers,
    tar headers) cost no second read. ``read(n)`` returns ``bytes``, or with ``zero_copy`` a
    ``memoryview`` of them where the range was widened (pyarrow takes either without a copy).
    """

    def __init__(
        self, part: Part, raw: Any, block: int, digests: bytes, zero_copy: bool = False, source: str = ""
    ) -> None:
        super().__init__()
        self.part, self.raw, self.block, self.digests = part, raw, block, digests
        self.source = source if source and source != part.url else ""  # a local copy (cache_dir)
        self.zero_copy, self.pos = zero_copy, 0
        self._held: Optional[Tuple[int, Any]] = None  # (start, verified bytes from there)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.part.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def close(self) -> None:
        self._held = None
        self.raw.close()
        super().close()

    def _span(self, start: int, end: int) -> Tuple[int, int]:
        b = self.block
        return start // b * b, min(self.part.size, -(-end // b) * b)

    def _verify(self, start: int, buf: Any) -> None:
        """``buf`` holds the part's bytes from ``start`` (a block boundary) to a block end or EOF."""
        view, b = memoryview(buf).cast("B"), self.block
        digest = xxhash.xxh3_64_digest
        self._compare(start // b, [digest(view[off : off + b]) for off in range(0, len(view), b)])

    def _compare(self, first: int, got: List[bytes]) -> None:
        """Raise unless ``got`` (digests of blocks ``first``, ``first + 1``, ...) are the committed ones."""
        sums = self.digests
        if b"".join(got) == sums[8 * first : 8 * (first + len(got))]:
            return
        i = next(first + k for k, d in enumerate(got) if d != sums[8 * (first + k) : 8 * (first + k + 1)])
        lo = i * self.block
        hi = min(lo + self.block, self.part.size)
        copy = f" of its local copy {self.source} (delete it to fetch the part again)" if self.source else ""
        raise _modified(
            self.part,
            f"bytes {lo}-{hi} (block {i} of {len(sums) // 8}){copy} do not match the checksum in"
            f" {self.part.sums[0] if self.part.sums else '_SUCCESS'}",
        )

    def _fill(self, buf: np.ndarray, start: int) -> None:
        if start != self.raw.tell():
            self.raw.seek(start)
        view, got = buf.data, 0
        while got < len(view):
            n = self.raw.readinto(view[got:])
            if not n:
                raise _modified(
                    self.part, f"it ends at byte {start + got}, _SUCCESS recorded {self.part.size}"
                )
            got += n

    def read_array(self, start: int, end: int) -> np.ndarray:
        """Bytes ``[start, end)`` as a writable uint8 array of its own (a view of a fresh fetch)."""
        a, z = self._span(start, end)
        buf = np.empty(max(0, z - a), np.uint8)
        self._fill(buf, a)
        self._verify(a, buf)
        self._held = (a, buf)
        return buf[start - a : end - a]

    def read_arrays(self, ranges: Sequence[Tuple[int, int]]) -> List[np.ndarray]:
        """Bytes ``[start, end)`` of each of ``ranges`` (increasing) as writable uint8 arrays.

        Every block under the ranges is read and hashed once per call, however many ranges it
        serves (a tar chunk's ~1 MB pieces, a run of rows): ranges whose blocks touch are read as
        one sequential run, each into an array of its own that also holds the bytes up to the
        next range (the first from its block start, the last to its block end); a block that
        straddles two arrays is hashed across them. A run is hashed as it is read (each read of
        at most :data:`STEP_BLOCKS` blocks right after it, while the CPU cache holds it) and checked
        whole before any array of it is returned: the arrays returned hold the very bytes hashed.
        """
        out: List[Optional[np.ndarray]] = [None] * len(ranges)
        b = self.block
        todo = [k for k, (start, end) in enumerate(ranges) if end > start]
        for k in range(len(ranges)):
            if ranges[k][1] <= ranges[k][0]:
                out[k] = np.empty(0, np.uint8)
        g = 0
        while g < len(todo):
            run = [todo[g]]
            a, z = self._span(*ranges[todo[g]])
            g += 1
            while g < len(todo):  # the next range starts in this run's last block (or later)
                start, end = ranges[todo[g]]
                if start < ranges[run[-1]][1] or start // b * b >= z:
                    break
                run.append(todo[g])
                z = max(z, self._span(start, end)[1])
                g += 1
            bufs = self._read_run(a, z, [a] + [ranges[k][0] for k in run[1:]] + [z])
            for k, (lo, buf) in zip(run, bufs):
                start, end = ranges[k]
                out[k] = buf[start - lo : end - lo]
        return out  # type: ignore[return-value]

    def _read_run(self, a: int, z: int, cuts: List[int]) -> List[Tuple[int, np.ndarray]]:
        """Blocks ``[a, z)`` read once into arrays ``[cuts[k], cuts[k + 1])``, hashed, and checked."""
        b, size, step = self.block, self.part.size, STEP_BLOCKS * self.block
        digest, got = xxhash.xxh3_64_digest, []
        h: Any = None  # the hasher of a block begun in the previous array
        if a != self.raw.tell():
            self.raw.seek(a)
        bufs = []
        for s, e in zip(cuts, cuts[1:]):
            buf = np.empty(e - s, np.uint8)
            bufs.append((s, buf))
            view, p = buf.data, s
            while p < e:
                q = min(e, p // b * b + step)
                self._readinto(view[p - s : q - s], p)
                if h is not None:  # the rest of a block begun in the previous array
                    be = min(p // b * b + b, size)
                    c = min(be, q)
                    h.update(view[p - s : c - s])
                    p = c
                    if p == be:
                        got.append(h.digest())
                        h = None
                if h is None:  # p is at a block start: the whole blocks of [p, q) at once
                    whole = q if q == size else q // b * b
                    got += [digest(view[o - s : o - s + b]) for o in range(p, whole, b)]
                    p = whole
                if p < q:  # a block this array ends inside: the rest is at the next array's start
                    h = xxhash.xxh3_64()
                    h.update(view[p - s : q - s])
                    p = q
        assert h is None, "a run ends at a block end"
        self._compare(a // b, got)
        return bufs

    def _readinto(self, view: Any, pos: int) -> None:
        got = 0
        while got < len(view):
            n = self.raw.readinto(view[got:])
            if not n:
                raise _modified(self.part, f"it ends at byte {pos + got}, _SUCCESS recorded {self.part.size}")
            got += n

    def _fetch(self, start: int, end: int) -> Any:
        """Verified bytes ``[start, end)``: one read of whole blocks, no copy when already aligned."""
        a, z = self._span(start, end)
        if a != self.raw.tell():
            self.raw.seek(a)
        data: bytes = self.raw.read(z - a)
        while len(data) < z - a:
            more = self.raw.read(z - a - len(data))
            if not more:
                raise _modified(
                    self.part, f"it ends at byte {a + len(data)}, _SUCCESS recorded {self.part.size}"
                )
            data += more
        self._verify(a, data)
        self._held = (a, data)
        if (a, z) == (start, end):
            return data
        return memoryview(data)[start - a : end - a] if self.zero_copy else data[start - a : end - a]

    def read(self, size: Optional[int] = -1) -> Any:
        start = self.pos
        end = self.part.size if size is None or size < 0 else min(self.part.size, start + size)
        if end <= start:
            return b""
        self.pos = end
        held = self._held
        if held is not None and held[0] <= start and end <= held[0] + len(held[1]):
            return memoryview(held[1]).cast("B")[start - held[0] : end - held[0]].tobytes()
        return self._fetch(start, end)

    def readinto(self, b: Any) -> int:
        data = self.read(len(memoryview(b).cast("B")))
        n = len(data)
        memoryview(b).cast("B")[:n] = data
        return n
