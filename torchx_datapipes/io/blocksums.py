"""Per-block checksums of a part (``_index/part-NNNNN.<ext>.sums``), written with the part.

The whole-file xxh3_128 a unit's commit record holds proves a part intact only to a reader that
hashes the whole part, which a training reader never does: it reads a chunk (a Parquet row group,
~1 MB pieces of a tar part, a run of JSON Lines) at a time, on many workers. So every part is also
hashed in fixed blocks of :data:`BLOCK` bytes as it is written (``xxh3_64`` per block, 8 bytes), and
the digests are committed beside the part, listed in the unit's ``files`` with their own size and
xxh3_128 like the part. A reader extends each byte range it reads to whole blocks, hashes exactly
those bytes and compares before it decodes a record (``io/verify.py``): ~0.1 ms a MB, and a
flipped bit anywhere in a block it reads is an error naming the part and the byte range.

The file is one JSON object (orjson)::

    {"format": "torchx_datapipes.block_sums", "version": 1, "algo": "xxh3_64", "block": 65536,
     "size": 96010240, "sums": "<16 hex digits per block, in order>"}

Like the whole-file checksum, it detects corruption and edits, not a forger who rewrites both.
"""

from typing import Any, Tuple

import orjson
import xxhash

FORMAT = "torchx_datapipes.block_sums"
VERSION = 1
ALGO = "xxh3_64"
BLOCK = 64 << 10  # a reader reads at most two blocks more than it asks for per range


class BlockHasher:
    """``xxh3_64`` of each :data:`BLOCK`-byte block of a stream, fed in writes of any size."""

    def __init__(self) -> None:
        self._digests = bytearray()
        self._h = xxhash.xxh3_64()
        self._fill = 0  # bytes of the current block hashed so far

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        pos, n = 0, len(view)
        while pos < n:
            take = min(BLOCK - self._fill, n - pos)
            if take == BLOCK:  # a whole block at once: no running state
                self._digests += xxhash.xxh3_64_digest(view[pos : pos + take])
            else:
                self._h.update(view[pos : pos + take])
                self._fill += take
                if self._fill == BLOCK:
                    self._digests += self._h.digest()
                    self._h.reset()
                    self._fill = 0
            pos += take

    def digests(self) -> bytes:
        """The digests of every block so far, the last (partial) block included."""
        return bytes(self._digests) + (self._h.digest() if self._fill else b"")


def encode(size: int, digests: bytes) -> bytes:
    return orjson.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "algo": ALGO,
            "block": BLOCK,
            "size": size,
            "sums": digests.hex(),
        }
    )


def of_bytes(data: bytes) -> bytes:
    """The sums file of a part whose bytes are ``data`` (a part rewritten whole)."""
    h = BlockHasher()
    h.update(data)
    return encode(len(data), h.digests())


def decode(data: bytes, size: int) -> Tuple[int, bytes]:
    """``(block size, digests)`` of a sums file, checked against its part's size; ValueError says why not."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} {FORMAT}")
    block, got = doc.get("block"), doc.get("size")
    if doc.get("algo") != ALGO or not isinstance(block, int) or block <= 0 or block % 512:
        raise ValueError(f"algo {doc.get('algo')!r} / block {block!r} are not {ALGO} over 512-byte multiples")
    if got != size:
        raise ValueError(f"it describes {got} bytes, the part has {size}")
    try:
        digests = bytes.fromhex(str(doc.get("sums")))
    except ValueError as e:
        raise ValueError(f"its sums are not hex ({e})") from e
    if len(digests) != 8 * -(-size // block):
        raise ValueError(f"it has {len(digests) // 8} sums for {-(-size // block)} blocks")
    return block, digests
