"""The no-pickle value format: JSON (orjson) plus raw out-of-band buffers.

A value made of ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``list``, ``tuple``,
``dict``, torch tensors, numpy arrays and numpy scalars is stored without pickle: the structure
is a JSON document and the bytes of every tensor, array and ``bytes`` object go after it as raw
buffers. Decoding parses JSON and rebuilds tensors/arrays from a dtype name checked against
torch's and numpy's dtypes and a shape checked against the buffer's length: nothing stored can
name a function to call, so nothing stored can run code.

JSON cannot say everything losslessly, so a few nodes are tagged objects ``{"__tdp__": kind, ...}``:
tuples, ``bytes``, dicts with non-``str`` keys (or a ``"__tdp__"`` key of their own), non-finite
floats, ints beyond 64 bits, tensors, arrays and numpy scalars. A value without tags and
buffers decodes with one ``orjson.loads``. Anything else (a ``datetime``, a dataclass, a
``str`` subclass, a recursive list, a sparse tensor, an object array) raises :class:`Unsafe`:
the codec then pickles it, if the cache's trust allows pickles.
"""

import math
from typing import Any, Dict, List, Tuple

import orjson

TAG = "__tdp__"
MAX_DEPTH = 200  # deeper values (or cycles) are left to pickle
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_PLAIN = frozenset({str, bool, type(None)})  # written as they are, without a call


class Unsafe(TypeError):
    """The value holds something this format cannot store exactly (the type is in ``args[0]``)."""


def _type_name(t: type) -> str:
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class _Encoder:
    """One value's walk: the JSON tree, the raw buffers, and whether any tag was written."""

    def __init__(self) -> None:
        self.buffers: List[Any] = []
        self.tagged = False
        self.arrays = False  # tensors or arrays among the buffers (they are decoded aligned)

    def buf(self, raw: Any) -> int:
        self.buffers.append(raw)
        return len(self.buffers) - 1

    def tag(self, kind: str, **fields: Any) -> Any:
        self.tagged = True
        return {TAG: kind, **fields}

    def enc(self, v: Any, depth: int) -> Any:  # noqa: C901 - one dispatch on the exact type
        t = type(v)
        if v is None or t is str or t is bool:
            return v
        if t is int:
            return v if _I64_MIN <= v <= _U64_MAX else self.tag("int", v=str(v))
        if t is float:
            return v if math.isfinite(v) else self.tag("float", v=repr(v))
        if depth > MAX_DEPTH:
            raise Unsafe(f"a value nested deeper than {MAX_DEPTH} levels (or a cycle)")
        depth += 1
        if t is dict:
            if TAG not in v and all(type(k) is str for k in v):
                return {k: x if type(x) in _PLAIN else self.enc(x, depth) for k, x in v.items()}
            items = [[self.enc(k, depth), self.enc(x, depth)] for k, x in v.items()]
            return self.tag("map", items=items)
        if t is list:
            return [x if type(x) in _PLAIN else self.enc(x, depth) for x in v]
        if t is tuple:
            return self.tag("tuple", items=[self.enc(x, depth) for x in v])
        if t is bytes:
            return self.tag("bytes", buf=self.buf(v))
        if t.__module__ == "torch" and t.__name__ == "Tensor":
            return self.tensor(v)
        if t.__module__ == "numpy":
            return self.numpy(v)
        raise Unsafe(_type_name(t))

    def tensor(self, t: Any) -> Any:
        import torch

        if t.layout != torch.strided or t.is_quantized or t.is_nested:
            raise Unsafe(f"torch.Tensor with layout {t.layout}")
        # resolve lazy conj/neg views first: their bits cannot be reinterpreted as raw bytes
        data = t.detach().cpu().resolve_conj().resolve_neg().contiguous()
        raw = data.reshape(-1).view(torch.uint8).numpy() if data.numel() else b""
        dtype = str(data.dtype).removeprefix("torch.")
        self.arrays = True
        return self.tag("tensor", buf=self.buf(raw), dtype=dtype, shape=list(data.shape))

    def numpy(self, v: Any) -> Any:
        import numpy as np

        if isinstance(v, np.ndarray) and type(v) is np.ndarray:
            kind = "ndarray"
        elif isinstance(v, np.generic):
            kind, v = "npscalar", np.asarray(v)
        else:
            raise Unsafe(_type_name(type(v)))
        if v.dtype.hasobject or v.dtype.fields is not None or v.dtype.subdtype is not None:
            raise Unsafe(f"numpy array of dtype {v.dtype}")
        data = v if v.flags.c_contiguous else np.ascontiguousarray(v)  # (ascontiguousarray makes 0-d 1-d)
        raw = data.reshape(-1).view(np.uint8) if data.size else b""
        self.arrays = True
        return self.tag(kind, buf=self.buf(raw), dtype=data.dtype.str, shape=list(data.shape))


def encode(value: Any) -> Tuple[bytes, List[Any], bool, bool]:
    """(JSON bytes, raw buffers, tagged, arrays) of ``value``; raises :class:`Unsafe`."""
    e = _Encoder()
    tree = e.enc(value, 0)
    try:
        doc = orjson.dumps(tree)
    except (TypeError, orjson.JSONEncodeError) as err:  # e.g. a str with lone surrogates
        raise Unsafe(f"a value orjson cannot write ({err})") from err
    return doc, e.buffers, e.tagged, e.arrays


_TORCH_DTYPES: Dict[str, Any] = {}
_TORCH: List[Any] = []  # the torch module, once a tensor has been decoded


def _torch_dtype(name: Any) -> Any:
    """The torch dtype called ``name`` (and nothing else torch has under that name)."""
    dtype = _TORCH_DTYPES.get(name) if type(name) is str else None
    if dtype is None:
        import torch

        _TORCH[:] = [torch]
        dtype = getattr(torch, name, None) if type(name) is str else None
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"not a torch dtype: {name!r}")
        _TORCH_DTYPES[name] = dtype
    return dtype


class _Decoder:
    def __init__(self, buffers: List[memoryview]) -> None:
        self.buffers = buffers

    def buf(self, node: Any) -> memoryview:
        i = node["buf"]
        if type(i) is not int or not 0 <= i < len(self.buffers):
            raise ValueError(f"buffer index {i!r} out of range ({len(self.buffers)} buffers)")
        return self.buffers[i]

    def dec(self, v: Any) -> Any:
        t = type(v)
        if t is list:
            return [self.dec(x) for x in v]
        if t is not dict:
            return v
        kind = v.get(TAG)
        if kind is None:
            return {k: self.dec(x) for k, x in v.items()}
        if kind == "tuple":
            return tuple([self.dec(x) for x in v["items"]])
        if kind == "map":
            return {self.dec(k): self.dec(x) for k, x in v["items"]}
        if kind == "bytes":
            return bytes(self.buf(v))
        if kind == "int":
            return int(v["v"])
        if kind == "float":
            if v["v"] not in ("nan", "inf", "-inf"):
                raise ValueError(f"not a non-finite float: {v['v']!r}")
            return float(v["v"])
        if kind == "tensor":
            return self.tensor(v)
        if kind in ("ndarray", "npscalar"):
            return self.numpy(v, kind)
        raise ValueError(f"unknown tag {kind!r}")

    @staticmethod
    def shape(node: Any, raw: memoryview, itemsize: int) -> Tuple[int, ...]:
        shape = node["shape"]
        dims = tuple(shape) if type(shape) is list else ("not a list",)
        numel = math.prod(dims)  # TypeError for anything but numbers
        if type(numel) is not int or (dims and min(dims) < 0) or numel * itemsize != raw.nbytes:
            raise ValueError(f"shape {shape!r} x {itemsize} bytes does not match a buffer of {raw.nbytes}")
        return dims

    def tensor(self, node: Any) -> Any:
        dtype = _torch_dtype(node["dtype"])
        raw = self.buf(node)
        shape = self.shape(node, raw, dtype.itemsize)
        torch = _TORCH[0]
        if raw.nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        flat = torch.frombuffer(raw, dtype=dtype)
        return flat if len(shape) == 1 else flat.reshape(shape)  # reshape costs ~4 us even when a no-op

    def numpy(self, node: Any, kind: str) -> Any:
        import numpy as np

        name = node["dtype"]
        dtype = np.dtype(name) if type(name) is str and len(name) < 32 else None
        if dtype is None or dtype.hasobject or dtype.fields is not None or dtype.str != name:
            raise ValueError(f"not a plain numpy dtype: {name!r}")
        raw = self.buf(node)
        shape = self.shape(node, raw, dtype.itemsize)
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape) if raw.nbytes else np.empty(shape, dtype)
        return arr[()] if kind == "npscalar" else arr


def decode(doc: memoryview, buffers: List[memoryview], tagged: bool) -> Any:
    """The value of a JSON document and its buffers (raises ValueError/KeyError/TypeError if bad)."""
    tree = orjson.loads(doc)
    return _Decoder(buffers).dec(tree) if tagged or buffers else tree
