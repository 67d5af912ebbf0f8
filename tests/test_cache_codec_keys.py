"""Key hashing fast paths and the tensor codec's frame format."""

from typing import Any, List

import numpy as np
import pytest
import torch

from torchx_datapipes.cache.codec import ALIGN, CodecError, TensorCodec
from torchx_datapipes.cache.keys import key_bytes, stored_key, stored_keys

KEYS: List[Any] = [
    "",
    "a b\n\x00",
    "é" * 300,
    0,
    -7,
    2**70,
    True,
    False,
    None,
    1.0,
    b"\xff",
    ("a", 1, (2.5,)),
]


def test_fast_paths_give_the_same_stored_keys() -> None:
    assert stored_keys("ns:0:", KEYS) == [stored_key("ns:0:", k) for k in KEYS]
    assert len({key_bytes(k) for k in (1, "1", True, 1.0, b"1")}) == 5  # types never collide
    assert all(len(k) < 100 and " " not in k for k in stored_keys("ns:0:", KEYS))


def test_unhashable_key_types_are_refused_with_a_hint() -> None:
    for bad in (bytearray(b"x"), [1], {"a": 1}):
        with pytest.raises(TypeError, match="key_fn"):
            stored_keys("p:", [bad])


def test_decoded_buffers_are_aligned_writable_and_owned() -> None:
    codec = TensorCodec()
    value = {"a": torch.arange(3, dtype=torch.int8), "b": np.arange(5.0), "c": torch.randn(7).double()}
    data = codec.encode(value)
    out = codec.decode(data)
    assert out["a"].data_ptr() % ALIGN == 0 and out["c"].data_ptr() % ALIGN == 0
    assert out["b"].ctypes.data % ALIGN == 0 and out["b"].flags.writeable
    out["c"].add_(1)  # writable, and not a view of the stored bytes
    assert torch.equal(codec.decode(data)["c"], value["c"])


def test_plain_values_skip_the_buffer_copy_and_truncation_is_detected() -> None:
    codec = TensorCodec()
    data = codec.encode({"k": [1, "two", None]})
    assert codec.decode(data) == {"k": [1, "two", None]}
    for bad in (data[:-1], data + b"x", b"TDC1" + data[4:10], b"nonsense"):
        with pytest.raises(CodecError):
            codec.decode(bad)
    tensor_data = codec.encode(torch.ones(4))
    with pytest.raises(CodecError, match="length mismatch"):
        codec.decode(tensor_data[:-2])
