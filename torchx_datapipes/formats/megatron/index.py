"""The layout of Megatron's indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``): the index, encoded and decoded.

The layout is Megatron-LM's (``megatron/core/datasets/indexed_dataset.py``, ``_IndexWriter``), read by
Megatron, NeMo and datatrove and written here byte for byte as ``IndexedDatasetBuilder`` writes it:

- ``.bin``: every sequence's tokens, concatenated, in the index's dtype, nothing else;
- ``.idx``: ``b"MMIDIDX\\x00\\x00"``, ``<Q`` version 1, ``<B`` dtype code (1 uint8, 2 int8, 3 int16,
  4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), ``<Q`` sequence count, ``<Q`` document count,
  then ``int32`` sequence lengths, ``int64`` sequence byte pointers into the ``.bin`` and ``int64``
  document indices (``[0, ..., sequence count]``: document ``d`` holds sequences
  ``[indices[d], indices[d + 1])``; here one sequence per document).

Output only: this package writes shards (``writer.py``: the tokenize op, ``--output_format
megatron``) and reads them back for training (``data/tokens.py``); it does not plan shards as an
input format. Non-goals: multimodal shards (``sequence_modes``) and several sequences per document.
"""

import struct
from dataclasses import dataclass
from typing import Any, Dict, Type

import numpy as np

from torchx_datapipes.errors import ReadError

HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
_PREAMBLE = struct.Struct("<9sQBQQ")  # header, version, dtype code, sequence count, document count
CODES: Dict[Type[np.number], int] = {  # type: ignore[type-arg]
    np.uint8: 1,
    np.int8: 2,
    np.int16: 3,
    np.int32: 4,
    np.int64: 5,
    np.float64: 6,
    np.float32: 7,
    np.uint16: 8,
}
DTYPES = {code: np.dtype(t) for t, code in CODES.items()}
TOKEN_DTYPES = ("uint16", "int32", "int64")  # what --dtype accepts besides auto
UINT16_VOCAB_LIMIT = 65500  # Megatron's DType.optimal_dtype: uint16 below this vocabulary size


def optimal_dtype(vocab_size: int) -> np.dtype:  # type: ignore[type-arg]
    """Megatron's choice: ``uint16`` for a vocabulary of fewer than 65,500 tokens, else ``int32``."""
    return np.dtype(np.uint16 if vocab_size < UINT16_VOCAB_LIMIT else np.int32)


def code_of(dtype: Any) -> int:
    dt = np.dtype(dtype)
    for t, code in CODES.items():
        if np.dtype(t) == dt:
            return code
    raise ValueError(f"dtype {dt} has no Megatron code; use one of {sorted(str(d) for d in DTYPES.values())}")


@dataclass(frozen=True)
class MegatronIndex:
    """A parsed ``.idx``: the token dtype and the three arrays."""

    dtype: np.dtype  # type: ignore[type-arg]
    lengths: np.ndarray  # int32, one per sequence
    pointers: np.ndarray  # int64 byte offsets into the .bin
    documents: np.ndarray  # int64 document indices, [0, ..., sequence count]

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum(dtype=np.int64))


def encode_index(dtype: Any, lengths: np.ndarray) -> bytes:
    """The ``.idx`` of sequences of ``lengths`` tokens, one sequence per document."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = len(lengths)
    if n and (lengths.min() < 0 or lengths.max() > np.iinfo(np.int32).max):
        raise ValueError("a sequence length does not fit Megatron's int32 lengths")
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lengths[:-1] * itemsize, out=pointers[1:])
    documents = np.arange(n + 1, dtype=np.int64)
    return b"".join(
        (
            _PREAMBLE.pack(HEADER, VERSION, code_of(dtype), n, n + 1),
            lengths.astype("<i4").tobytes(),
            pointers.astype("<i8").tobytes(),
            documents.astype("<i8").tobytes(),
        )
    )


def index_size(sequences: int) -> int:
    """The bytes of the ``.idx`` of ``sequences`` sequences, one per document (:func:`encode_index`)."""
    return _PREAMBLE.size + 4 * sequences + 8 * sequences + 8 * (sequences + 1)


def sequences_of(size: int, where: str = "index") -> int:
    """The sequences of an ``.idx`` of :func:`encode_index` from its size alone (the inverse of
    :func:`index_size`): a job's commit counts its parts' documents from their recorded sizes."""
    n, rest = divmod(size - index_size(0), index_size(1) - index_size(0))
    if n < 0 or rest:
        raise ReadError(f"{where}: {size} bytes is not the size of a one-sequence-per-document index")
    return n


def decode_index(data: bytes, where: str = "index") -> MegatronIndex:
    """Parse an ``.idx`` (``where`` names it in errors); every count and offset is checked."""
    if len(data) < _PREAMBLE.size:
        raise ReadError(f"{where}: {len(data)} bytes is too short for a Megatron index header")
    header, version, code, n, ndocs = _PREAMBLE.unpack_from(data)
    if header != HEADER or version != VERSION:
        raise ReadError(f"{where}: not a Megatron MMIDIDX version 1 index (header {header!r}, v{version})")
    if code not in DTYPES:
        raise ReadError(f"{where}: unknown dtype code {code}")
    want = _PREAMBLE.size + 4 * n + 8 * n + 8 * ndocs
    if len(data) != want:
        raise ReadError(f"{where}: {len(data)} bytes, but {n} sequences and {ndocs} documents need {want}")
    off = _PREAMBLE.size
    lengths = np.frombuffer(data, "<i4", n, off)
    pointers = np.frombuffer(data, "<i8", n, off + 4 * n)
    documents = np.frombuffer(data, "<i8", ndocs, off + 12 * n)
    return MegatronIndex(DTYPES[code], lengths, pointers, documents)
