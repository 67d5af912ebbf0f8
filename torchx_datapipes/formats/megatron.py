"""Megatron's indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``): the writer of one shard, and its index.

The layout is Megatron-LM's (``megatron/core/datasets/indexed_dataset.py``, ``_IndexWriter``), read by
Megatron, NeMo and datatrove and written here byte for byte as ``IndexedDatasetBuilder`` writes it:

- ``.bin``: every sequence's tokens, concatenated, in the index's dtype, nothing else;
- ``.idx``: ``b"MMIDIDX\\x00\\x00"``, ``<Q`` version 1, ``<B`` dtype code (1 uint8, 2 int8, 3 int16,
  4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), ``<Q`` sequence count, ``<Q`` document count,
  then ``int32`` sequence lengths, ``int64`` sequence byte pointers into the ``.bin`` and ``int64``
  document indices (``[0, ..., sequence count]``: document ``d`` holds sequences
  ``[indices[d], indices[d + 1])``; here one sequence per document).

Output only: this package writes shards (``runner/tokenize.py``) and reads them back for training
(``data/tokens.py``); it does not plan shards as an input format. Non-goals: multimodal shards
(``sequence_modes``) and several sequences per document.
"""

import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Type

import numpy as np

from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats.writer import BasePart, Failures
from torchx_datapipes.io.checksum import FileSum, sum_bytes, write_file

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


class MegatronShard(BasePart):
    """One shard being written: ``add(tokens)`` per document; ``commit()`` renames the ``.bin`` into
    place, then writes the ``.idx`` (atomically), so a committed ``.idx`` always has its ``.bin``."""

    ext = "bin"

    def __init__(self, url: str, dtype: Any) -> None:
        if not url.endswith(".bin"):
            raise ValueError(f"a Megatron shard's data file ends with .bin: {url}")
        self.dtype = np.dtype(dtype)
        self.lengths: List[int] = []
        self.idx_sum: Optional[FileSum] = None
        super().__init__(url)

    @property
    def nbytes(self) -> int:
        return int(self.fh.size)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    def add(self, tokens: np.ndarray) -> None:
        """Append one document (one sequence); ``tokens`` must already hold the shard's dtype."""
        if tokens.dtype != self.dtype:
            raise TypeError(f"tokens of dtype {tokens.dtype} written to a {self.dtype} shard")
        self.fh.write(np.ascontiguousarray(tokens).view(np.uint8))
        self.lengths.append(len(tokens))
        self.records += 1

    def _write(self, recs: List[Any]) -> Failures:
        for tokens in recs:
            self.add(np.asarray(tokens, dtype=self.dtype))
        return []

    def commit(self) -> None:
        super().commit()
        data = encode_index(self.dtype, np.asarray(self.lengths, dtype=np.int64))
        write_file(idx_url(self.url), data)
        self.idx_sum = FileSum("", len(data), sum_bytes(data))

    def file_sums(self, rel: str) -> List[FileSum]:
        """The ``.bin``, its block sums and the ``.idx`` (paths relative to the output)."""
        if self.idx_sum is None:
            raise RuntimeError(f"{self.url} is not committed")
        idx = FileSum(idx_url(rel), self.idx_sum.size, self.idx_sum.xxh3_128)
        return [*super().file_sums(rel), idx]


def idx_url(bin_url: str) -> str:
    """``part-00007.idx`` beside ``part-00007.bin``."""
    return bin_url[: -len(".bin")] + ".idx"
