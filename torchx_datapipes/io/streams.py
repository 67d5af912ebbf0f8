"""Byte streams of one input file as planned: capped at the planned size, decompressed with a check.

Two promises live here. A unit never reads past the size the plan recorded (bytes appended
during a run belong to the next run), and a compressed stream that ends before its
end-of-stream marker raises :class:`TruncatedError` instead of returning short data
(zstandard's streaming reader and fsspec's wrapper return short data silently on a truncated
frame; gzip, bz2 and lzma raise a bare ``EOFError`` that names no file).
"""

import bz2
import io
import lzma
import zlib
from typing import Any, Callable, Optional, Tuple

from torchx_datapipes.errors import InputError

_RAW_CHUNK = 1 << 18
_OUT_MAX = 1 << 23
_ZSTD_IN = 512  # zstd input per call: at most ~16 MiB out, whatever the frame holds (costs ~nothing)


class TruncatedError(EOFError):
    """The compressed stream ended before its end-of-stream marker."""


class CorruptError(ValueError):
    """The compressed stream could not be decoded."""


class Capped(io.RawIOBase):
    """A raw file that ends at ``cap`` bytes (the planned size), whatever was appended since."""

    def __init__(self, fh: Any, cap: int, name: str = "<input>") -> None:
        super().__init__()
        self.fh, self.cap, self.pos, self.consumed, self.name = fh, cap, 0, 0, name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self.pos + offset, io.SEEK_END: self.cap + offset}[whence]
        self.pos = max(0, min(self.cap, target))
        self.fh.seek(self.pos)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf: Any) -> int:
        want = min(len(buf), self.cap - self.pos)
        if want <= 0:
            return 0
        data = self.fh.read(want)
        n = len(data)
        if n == 0:
            raise InputError(
                f"{self.name} changed during the run (shrank while being read): planned {self.cap}"
                f" bytes, it ended at {self.pos}; rerun to plan again (and do not write into the inputs"
                " of a running job)"
            )
        buf[:n] = data
        self.pos += n
        self.consumed += n
        return n

    def close(self) -> None:
        try:
            self.fh.close()
        finally:
            super().close()


def _zstd() -> Any:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


_DECOMPRESSORS: dict[str, Callable[[], Any]] = {
    "gzip": lambda: zlib.decompressobj(wbits=31),
    "bz2": bz2.BZ2Decompressor,
    "xz": lzma.LZMADecompressor,
    "zstd": _zstd,
}


class Decompressing(io.RawIOBase):
    """Decompresses ``raw`` (concatenated members/frames too); raises :class:`TruncatedError` at a cut.

    Output is produced in pieces of at most ``_OUT_MAX`` bytes (zlib, bz2 and lzma take an output
    limit; zstd is fed small slices), so a highly compressed chunk never becomes one huge buffer.
    """

    def __init__(self, raw: Capped, compression: str) -> None:
        super().__init__()
        self.raw, self.compression = raw, compression
        self._new = _DECOMPRESSORS[compression]
        self._dec: Any = self._new()
        self._fed = False  # the current decompressor has seen input (a member is open)
        self._tail = b""  # zlib's (zstd's) input not yet consumed (its output limit was reached)
        self._zstd_rest = b""  # zstd's input after the end of a frame
        self._leftover = b""  # input after the end of a member: the next member's start
        self._pending = b""
        self._off = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        while self._off >= len(self._pending):
            if not self._fill():
                return 0
        n = min(len(buf), len(self._pending) - self._off)
        buf[:n] = self._pending[self._off : self._off + n]
        self._off += n
        return n

    def _more_output(self) -> bool:
        """The decompressor holds output it could not hand out (its output limit was reached)."""
        if self.compression in ("gzip", "zstd"):
            return bool(self._tail)
        if self.compression in ("bz2", "xz"):
            return not self._dec.eof and not self._dec.needs_input
        return False

    def _step(self, data: bytes) -> bytes:
        d = self._dec
        if self.compression == "gzip":
            out = d.decompress(self._tail + data, _OUT_MAX)
            self._tail = d.unconsumed_tail
            return out  # type: ignore[no-any-return]
        if self.compression in ("bz2", "xz"):
            return d.decompress(data, _OUT_MAX)  # type: ignore[no-any-return]
        return self._zstd_step(self._tail + data)

    def _zstd_step(self, data: bytes) -> bytes:
        """zstandard has no output limit, and a frame of RLE blocks grows ~32000x (9 KB -> 300 MB):
        feed it small slices until ``_OUT_MAX`` is out, keeping the rest for the next step."""
        d, outs, total, i = self._dec, [], 0, 0
        while i < len(data) and total < _OUT_MAX:
            piece = d.decompress(data[i : i + _ZSTD_IN])
            i += _ZSTD_IN
            outs.append(piece)
            total += len(piece)
            if d.eof:  # the frame ended inside this slice: the rest starts the next frame
                self._zstd_rest, self._tail = d.unused_data + data[i:], b""
                return b"".join(outs)
        self._tail = data[i:]
        return b"".join(outs)

    def _fill(self) -> bool:
        """Decompress more into ``_pending``; False at a clean end of the stream."""
        more = self._more_output()
        data, self._leftover = (self._leftover, b"") if self._leftover else (b"", b"")
        if not data and not more:
            data = self.raw.read(_RAW_CHUNK)
            if not data:
                if self._fed and not self._dec.eof:
                    raise TruncatedError(f"{self.compression} stream ends before its end-of-stream marker")
                return False
        if self._dec.eof and not data.strip(b"\0"):
            return True  # zero padding after the last member (read on)
        if self._dec.eof:  # the next member or frame of a concatenated file
            self._dec, self._fed, self._tail = self._new(), False, b""
        try:
            out = self._step(data)
        except Exception as e:  # zlib.error, OSError, lzma.LZMAError, zstandard.ZstdError, ...
            raise CorruptError(f"{self.compression} stream is corrupt: {e}") from e
        self._fed = True
        if self._dec.eof:
            rest = self._zstd_rest if self.compression == "zstd" else self._dec.unused_data
            self._leftover = rest if rest.strip(b"\0") else b""  # zero padding after the last member
        self._pending, self._off = out, 0
        return True

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            super().close()


def open_capped(
    fh: Any, cap: int, compression: Optional[str], buffered: bool, name: str = "<input>"
) -> Tuple[Any, Capped]:
    """``fh`` limited to ``cap`` raw bytes and decompressed if ``compression``: ``(stream, raw)``.

    Uncompressed streams are always buffered (readline, seek); a compressed one only if asked,
    since an unbuffered one hands out every byte decoded before a cut.
    """
    raw = Capped(fh, cap, name)
    stream: Any = raw if compression is None else Decompressing(raw, compression)
    if buffered or compression is None:
        return io.BufferedReader(stream, buffer_size=1 << 16), raw
    return stream, raw
