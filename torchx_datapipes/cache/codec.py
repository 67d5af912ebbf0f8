"""Value codecs: how a cached value becomes bytes and back.

The default :class:`TensorCodec` is pickle protocol 5 with out-of-band buffers: the raw
bytes of torch tensors and numpy arrays -- anywhere in the value, e.g. a dict of
tensors -- are stored after a small header instead of inside the pickle stream. Encoding
a 1 MiB tensor this way costs tens of microseconds instead of ~500 us for ``pickle.dumps``
of the tensor (../shared/DESIGN.md). A tensor is stored as its own elements only, so a
view (``big[:10]``) never drags its whole storage along: storing a slice is a clone.

Decoding returns writable tensors/arrays that own their memory, never views of the cache.

Security: decoding unpickles, and unpickling runs code. Only point a cache at a server
that you trust as much as your own code.
"""

import pickle
import struct
from typing import Any, Callable, Dict, List, Protocol, Tuple, runtime_checkable

MAGIC = b"TDC1"
ALIGN = 64  # out-of-band buffers start at multiples of 64 bytes: decoded tensors are aligned
_HEAD = struct.Struct("<4sIQ")  # magic, number of out-of-band buffers, pickle length


class CodecError(ValueError):
    """Stored bytes could not be decoded (corrupt, truncated, or written by another codec)."""


@runtime_checkable
class Codec(Protocol):
    """Turns values into bytes and back. Must be picklable (it travels with the cache)."""

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


def _aligned_buffer(size: int) -> memoryview:
    """A writable buffer of ``size`` bytes whose start is ALIGN-aligned."""
    import numpy as np

    raw = np.empty(size + ALIGN, dtype=np.uint8)
    off = -raw.ctypes.data % ALIGN
    return memoryview(raw[off : off + size])  # type: ignore[arg-type]


def _rebuild_tensor(raw: Any, dtype: str, shape: Tuple[int, ...]) -> Any:
    import torch

    torch_dtype = getattr(torch, dtype)
    if not shape or 0 not in shape:
        flat = torch.frombuffer(raw, dtype=torch_dtype) if len(memoryview(raw)) else None
        if flat is not None:
            return flat.reshape(shape)
    return torch.empty(shape, dtype=torch_dtype)


def _tensor_reduce(t: Any) -> Any:
    """Reduce a plain dense CPU-able tensor to (raw bytes out of band, dtype, shape)."""
    import torch

    # resolve lazy conj/neg views first: their bits cannot be reinterpreted as raw bytes
    data = t.detach().cpu().resolve_conj().resolve_neg().contiguous()
    raw = data.reshape(-1).view(torch.uint8).numpy() if data.numel() else b""
    return _rebuild_tensor, (
        pickle.PickleBuffer(raw),
        str(data.dtype).removeprefix("torch."),
        tuple(data.shape),
    )


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj).__module__ == "torch" and type(obj).__name__ == "Tensor":
            import torch  # already imported: the object is a torch.Tensor

            if obj.layout == torch.strided and not obj.is_quantized and not obj.is_nested:
                return _tensor_reduce(obj)
        return NotImplemented


class TensorCodec:
    """Pickle protocol 5; tensors and numpy arrays as raw out-of-band buffers (the default)."""

    def encode(self, value: Any) -> bytes:
        import io

        buffers: List[pickle.PickleBuffer] = []
        stream = io.BytesIO()
        _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(value)
        payload = stream.getbuffer()
        raws = [b.raw() for b in buffers]
        lens = struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
        parts: List[Any] = [_HEAD.pack(MAGIC, len(raws), payload.nbytes), lens, payload]
        for i, r in enumerate(raws):
            parts.append(r)
            if i + 1 < len(raws) and r.nbytes % ALIGN:
                parts.append(bytes(-r.nbytes % ALIGN))  # the next buffer starts aligned
        return b"".join(parts)

    def decode(self, data: bytes) -> Any:
        try:
            magic, nbuf, plen = _HEAD.unpack_from(data, 0)
            if magic != MAGIC:
                raise CodecError(f"not written by TensorCodec (magic {magic!r})")
            lens = struct.unpack_from(f"<{nbuf}Q", data, _HEAD.size)
            start = _HEAD.size + 8 * nbuf
            if not nbuf:  # no tensors/arrays: nothing to copy out of band
                if start + plen != len(data):
                    raise CodecError(f"length mismatch: header says {start + plen}, got {len(data)}")
                return pickle.loads(memoryview(data)[start:])
            offsets, off = [], 0
            for n in lens:
                offsets.append(off)
                off += n + (-n % ALIGN)
            size = offsets[-1] + lens[-1]
            if start + plen + size != len(data):
                raise CodecError(f"length mismatch: header says {start + plen + size}, got {len(data)}")
            # one copy into a fresh, aligned, writable buffer: decoded arrays/tensors own their memory
            body = _aligned_buffer(size)
            body[:] = memoryview(data)[start + plen :]
            views = [body[o : o + n] for o, n in zip(offsets, lens)]
            return pickle.loads(memoryview(data)[start : start + plen], buffers=views)
        except CodecError:
            raise
        except Exception as e:
            raise CodecError(f"{type(e).__name__}: {e}") from e


class PickleCodec:
    """Plain ``pickle`` (protocol 5, in band). Simple; slow for large tensors."""

    def encode(self, value: Any) -> bytes:
        return pickle.dumps(value, protocol=5)

    def decode(self, data: bytes) -> Any:
        try:
            return pickle.loads(data)
        except Exception as e:
            raise CodecError(f"{type(e).__name__}: {e}") from e


class BytesCodec:
    """Values are ``bytes`` already: stored as they are. Nothing is unpickled."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"BytesCodec stores bytes only, got {type(value).__name__}; use codec=tensor")
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        return bytes(data)


CODECS: Dict[str, Callable[[], Codec]] = {"tensor": TensorCodec, "pickle": PickleCodec, "bytes": BytesCodec}


def codec_named(name: str) -> Codec:
    try:
        return CODECS[name]()
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; valid: {sorted(CODECS)}") from None
