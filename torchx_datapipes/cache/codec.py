"""Value codecs: how a cached value becomes bytes and back.

The default :class:`TensorCodec` stores a value without pickle whenever it can
(:mod:`torchx_datapipes.cache.safe`): JSON-able values, ``bytes``, tuples, torch tensors and numpy
arrays -- anywhere in the value, e.g. a dict of tensors -- become a JSON document followed by the
raw bytes of every tensor/array. Encoding a 1 MiB tensor this way costs tens of microseconds
instead of ~500 us for ``pickle.dumps`` of the tensor (../shared/DESIGN.md). A tensor is stored as
its own elements only, so a view (``big[:10]``) never drags its whole storage along.

Anything else (a ``datetime``, a dataclass, ...) is pickled (protocol 5, tensors still out of
band), and a pickle is only ever loaded under the cache's trust (:mod:`torchx_datapipes.cache.trust`):
``pickle=true`` trusts every pickle of the store, an HMAC key trusts only pickles signed with it,
``pickle=false`` none. A pickle without valid trust is never unpickled: decoding raises
:class:`UntrustedValueError` (the cache counts it and treats it as a miss).

Frame (``TDC2``): header (magic, kind, flags, number of buffers, document length), the buffer
lengths, the HMAC (signed pickles only: HMAC-SHA256 over every other byte of the frame), the
document (JSON or a pickle stream), then the buffers, each starting at a multiple of 64 bytes
from the first. Decoding returns writable tensors/arrays that own their memory, never views of
the cache.
"""

import hmac
import pickle
import struct
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple, Union, runtime_checkable

from torchx_datapipes.cache import safe
from torchx_datapipes.cache.trust import MAC_BYTES, Trust

MAGIC = b"TDC2"
OLD_MAGIC = b"TDC1"  # before trust: a bare pickle with out-of-band buffers
ALIGN = 64  # out-of-band buffers start at multiples of 64 bytes: decoded tensors are aligned
_HEAD = struct.Struct("<4sBBHIQ")  # magic, kind, flags, 0, number of out-of-band buffers, document length
_OLD_HEAD = struct.Struct("<4sIQ")
_U64 = struct.Struct("<Q")
SAFE, PICKLED, SIGNED = 0, 1, 2  # kinds: JSON + buffers / a pickle / a pickle with an HMAC
_TAGGED = 1  # flag: the JSON document has tagged nodes to rebuild
_BYTES = 2  # flag: the value is one ``bytes`` object, the only buffer (no document)
_ARRAYS = 4  # flag: tensors/arrays among the buffers: copied once into an aligned block to decode
_NO_TRUST = Trust("none")
_PICKLE_HELP = (
    "give the cache a trust for pickles: ?pickle=true (unpickle whatever the store holds: only if"
    " nobody else can write to it) or ?hmac_key_file=PATH / ?hmac_key_env=NAME (unpickle only"
    " values signed with that key); see docs/cache.md, 'Trust boundary'"
)


class CodecError(ValueError):
    """Stored bytes could not be decoded (corrupt, truncated, or written by another codec)."""


class UntrustedValueError(CodecError):
    """A stored pickle that this cache's trust does not cover: never unpickled (a miss)."""


class UnsafeValueError(TypeError):
    """A value that needs pickle, on a cache that unpickles nothing (``pickle=false``)."""


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


def _frame(kind: int, flags: int, doc: Any, raws: List[Any], trust: Optional[Trust]) -> bytes:
    lens = [memoryview(r).nbytes for r in raws]
    parts: List[Any] = [_HEAD.pack(MAGIC, kind, flags, 0, len(raws), memoryview(doc).nbytes)]
    parts.append(struct.pack(f"<{len(raws)}Q", *lens))
    body: List[Any] = [doc]
    for i, r in enumerate(raws):
        body.append(r)
        if i + 1 < len(raws) and lens[i] % ALIGN:
            body.append(bytes(-lens[i] % ALIGN))  # the next buffer starts aligned
    if kind == SIGNED:
        assert trust is not None
        parts.append(trust.mac(parts + body))
    return b"".join(parts + body)


def _pickle(value: Any) -> Tuple[Any, List[Any]]:
    import io

    buffers: List[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _Pickler(stream, protocol=5, buffer_callback=buffers.append).dump(value)
    return stream.getbuffer(), [b.raw() for b in buffers]


def _split(
    data: Any, start: int, doc_len: int, lens: Tuple[int, ...], aligned: bool = True
) -> Tuple[memoryview, List[memoryview]]:
    """The document and the buffers: views of ``data``, or (``aligned``) of one fresh, aligned,
    writable copy, so that decoded tensors and arrays own their memory."""
    view = memoryview(data)
    offsets, off = [], 0
    for n in lens:
        offsets.append(off)
        off += n + (-n % ALIGN)
    size = offsets[-1] + lens[-1] if lens else 0
    if start + doc_len + size != len(view):
        raise CodecError(f"length mismatch: header says {start + doc_len + size}, got {len(view)}")
    if not lens:  # nothing to copy out of band
        return view[start:], []
    if aligned:
        body = _aligned_buffer(size)
        body[:] = view[start + doc_len :]
    else:  # bytes only: each is copied by bytes() as it is decoded
        body = view[start + doc_len :]
    return view[start : start + doc_len], [body[o : o + n] for o, n in zip(offsets, lens)]


def _untrusted(trust: Trust, what: str) -> UntrustedValueError:
    return UntrustedValueError(
        f"the stored value is {what}, and this cache trusts {trust.describe()}: not unpickled"
        " (another writer, another key, or a planted value); it is recomputed"
    )


class TensorCodec:
    """Tensors, arrays and JSON-able values without pickle; anything else pickled under ``trust``.

    Args:
        trust: which pickles may be written and loaded (None: none; a cache passes its own).
    """

    def __init__(self, trust: Optional[Trust] = None) -> None:
        self.trust = trust

    def encode(self, value: Any) -> bytes:
        if type(value) is bytes:
            return _frame(SAFE, _BYTES, b"", [value], None)
        try:
            doc, raws, tagged, arrays = safe.encode(value)
            return _frame(SAFE, (_TAGGED if tagged else 0) | (_ARRAYS if arrays else 0), doc, raws, None)
        except safe.Unsafe as e:
            what = e.args[0] if e.args else "an unknown type"
        return self._encode_pickle(value, what)

    def _encode_pickle(self, value: Any, what: str) -> bytes:
        trust = self.trust or _NO_TRUST
        if trust.mode == "none":
            raise UnsafeValueError(
                f"a value holding {what} is not JSON-able, a tensor or an array, so it needs pickle,"
                f" and this cache unpickles nothing (pickle=false): {_PICKLE_HELP}"
            )
        doc, raws = _pickle(value)
        return _frame(SIGNED if trust.mode == "hmac" else PICKLED, 0, doc, raws, trust)

    def decode(self, data: bytes) -> Any:
        try:
            if len(data) >= _HEAD.size:
                magic, kind, flags, _, nbuf, doc_len = _HEAD.unpack_from(data, 0)
                if magic == MAGIC and kind == SAFE:  # the hot path: no pickle in it
                    return self._decode_safe(data, flags, nbuf, doc_len)
            return self._decode_pickle(data, self.trust or _NO_TRUST)
        except CodecError:
            raise
        except Exception as e:
            raise CodecError(f"{type(e).__name__}: {e}") from e

    @staticmethod
    def _decode_safe(data: bytes, flags: int, nbuf: int, doc_len: int) -> Any:
        start = _HEAD.size + 8 * nbuf
        if flags & _BYTES:
            size = _U64.unpack_from(data, _HEAD.size)[0] if nbuf == 1 else -1
            if doc_len or len(data) != start + size:
                raise CodecError(f"length mismatch: a bytes frame of {len(data)} bytes says {start + size}")
            return bytes(data[start:])
        if not nbuf:
            if len(data) != start + doc_len:
                raise CodecError(f"length mismatch: header says {start + doc_len}, got {len(data)}")
            return safe.decode(memoryview(data)[start:], [], bool(flags & _TAGGED))
        lens = struct.unpack_from(f"<{nbuf}Q", data, _HEAD.size)
        doc, bufs = _split(data, start, doc_len, lens, bool(flags & _ARRAYS))
        return safe.decode(doc, bufs, bool(flags & _TAGGED))

    def _decode_pickle(self, data: bytes, trust: Trust) -> Any:
        """A frame that is not SAFE: a pickle, loaded only if ``trust`` covers it."""
        if bytes(data[:4]) == OLD_MAGIC:
            return self._decode_old(data, trust)
        if bytes(data[:1]) == b"\x80":  # a bare pickle (PickleCodec before trust, or planted)
            if trust.mode != "pickle":
                raise _untrusted(trust, "a bare pickle")
            return pickle.loads(data)
        magic, kind, flags, _, nbuf, doc_len = _HEAD.unpack_from(data, 0)
        if magic != MAGIC:
            raise CodecError(f"not written by this codec (magic {bytes(magic)!r})")
        if kind not in (PICKLED, SIGNED):
            raise CodecError(f"unknown kind {kind}")
        if kind == PICKLED and trust.mode != "pickle":
            raise _untrusted(trust, "an unsigned pickle")
        lens = struct.unpack_from(f"<{nbuf}Q", data, _HEAD.size)
        start = _HEAD.size + 8 * nbuf
        if kind == SIGNED:
            if trust.mode == "none":
                raise _untrusted(trust, "a signed pickle")
            mac = bytes(data[start : start + MAC_BYTES])
            start += MAC_BYTES
            view = memoryview(data)
            if trust.mode == "hmac" and not hmac.compare_digest(
                mac, trust.mac([view[: start - MAC_BYTES], view[start:]])
            ):
                raise _untrusted(trust, "a pickle whose HMAC does not match this cache's key")
        doc, bufs = _split(data, start, doc_len, lens)
        return pickle.loads(doc, buffers=bufs)

    @staticmethod
    def _decode_old(data: bytes, trust: Trust) -> Any:
        if trust.mode != "pickle":
            raise _untrusted(trust, "an unsigned pickle (an older frame, TDC1)")
        magic, nbuf, plen = _OLD_HEAD.unpack_from(data, 0)
        lens = struct.unpack_from(f"<{nbuf}Q", data, _OLD_HEAD.size)
        doc, bufs = _split(data, _OLD_HEAD.size + 8 * nbuf, plen, lens)
        return pickle.loads(doc, buffers=bufs)


class PickleCodec(TensorCodec):
    """Every value pickled (protocol 5, tensors out of band), under the cache's trust."""

    def encode(self, value: Any) -> bytes:
        return self._encode_pickle(value, type(value).__name__)


class BytesCodec:
    """Values are ``bytes`` already: stored as they are. Nothing is unpickled."""

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"BytesCodec stores bytes only, got {type(value).__name__}; use codec=tensor")
        return bytes(value)

    def decode(self, data: bytes) -> Any:
        return bytes(data)


CODECS: Dict[str, Callable[[], Codec]] = {"tensor": TensorCodec, "pickle": PickleCodec, "bytes": BytesCodec}


def codec_for(codec: Union[str, Codec], trust: Trust) -> Codec:
    """A cache's codec: by name, or an object (a bare TensorCodec/PickleCodec gets the cache's trust)."""
    if isinstance(codec, str):
        codec = codec_named(codec, trust)
    elif isinstance(codec, TensorCodec) and codec.trust is None:
        codec = type(codec)(trust)
    if trust.mode == "hmac" and isinstance(codec, TensorCodec):
        trust.key()  # a missing or unsafe key file fails when the cache opens, not as a miss per value
    return codec


def codec_named(name: str, trust: Optional[Trust] = None) -> Codec:
    """The codec called ``name``, with the cache's ``trust`` for pickles."""
    if name not in CODECS:
        raise ValueError(f"unknown codec {name!r}; valid: {sorted(CODECS)}")
    return BytesCodec() if name == "bytes" else CODECS[name](trust)  # type: ignore[call-arg]
