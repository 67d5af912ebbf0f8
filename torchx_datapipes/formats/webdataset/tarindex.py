"""The offset index of a WebDataset part (``_index/part-NNNNN.tar.idx``), written with the part.

The WebDataset writer knows each member's name, data offset and size as it writes them, so it
commits them beside the part: reading a part then needs no header scan (150k tar headers, ~0.8 s
of Python for the 50k-image benchmark output, against ~10 ms to load its indexes). The index is
listed in the unit's commit record (size, checksum) like the part, so resume redoes a unit whose
index is damaged; a reader checks it against the manifest and the part and falls back to the
header scan when it does not match (``formats/webdataset/reader.py``).

The file is one JSON object (orjson)::

    {"format": "torchx_datapipes.tar_index", "version": 1, "tar_size": 96010240, "records": 5860,
     "suffixes": ["img.npy", "id", "label"], "keys": ["00000_000000", ...],
     "starts": [0, 3, 6, ...], "members": [0, 512, 12416, 1, 13312, 1, ...]}

``keys[r]`` is record ``r``'s key; its members are ``starts[r]:starts[r + 1]``; member ``m`` is
``members[3m:3m + 3]`` = (index into ``suffixes``, data offset in the tar, size). A suffix is the
member name after ``<key>.``. A record without members (every field None) is listed too.
"""

import functools
from array import array
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import orjson

FORMAT = "torchx_datapipes.tar_index"
VERSION = 1
_BLOCK = 512


@dataclass(frozen=True)
class TarIndex:
    """Records of one tar part: keys, member ranges, and each member's suffix, offset, size."""

    keys: List[str]
    starts: Sequence[int]  # records + 1 entries
    suffixes: List[str]
    # per member (int64 arrays: 8 bytes a value, where a list of ints costs ~36)
    sids: Sequence[int]  # index into suffixes
    offsets: Sequence[int]  # data offset in the tar
    sizes: Sequence[int]

    @functools.cached_property
    def layout(self) -> Optional[Tuple[int, ...]]:
        """The suffix ids every record has, in order, when all records have the same ones; else None."""
        starts, sids = np.asarray(self.starts, dtype=np.int64), np.asarray(self.sids, dtype=np.int64)
        k = int(starts[1] - starts[0]) if len(starts) > 1 else 0
        if k == 0 or np.any(np.diff(starts) != k):
            return None
        rows = sids.reshape(-1, k)
        return tuple(rows[0].tolist()) if bool(np.all(rows == rows[0])) else None

    def span(self, a: int, b: int) -> Tuple[int, int]:
        """The byte range ``[start, end)`` holding the members of records ``[a, b)`` (may be empty)."""
        m0, m1 = self.starts[a], self.starts[b]
        if m0 == m1:
            return 0, 0
        return self.offsets[m0], self.offsets[m1 - 1] + self.sizes[m1 - 1]


class IndexBuilder:
    """Collects ``(key, [(suffix, data offset, size), ...])`` per record, in tar order."""

    def __init__(self) -> None:
        self.keys: List[str] = []
        self.starts = array("q", [0])
        self.members = array("q")  # (suffix id, offset, size) per member
        self._ids: Dict[str, int] = {}

    def add(self, key: str, members: Sequence[Tuple[str, int, int]]) -> None:
        self.keys.append(key)
        for suffix, offset, size in members:
            self.members.extend((self._ids.setdefault(suffix, len(self._ids)), offset, size))
        self.starts.append(len(self.members) // 3)

    def index(self) -> TarIndex:
        m = self.members
        return TarIndex(self.keys, self.starts, list(self._ids), m[0::3], m[1::3], m[2::3])

    def encode(self, tar_size: int) -> bytes:
        return orjson.dumps(
            {
                "format": FORMAT,
                "version": VERSION,
                "tar_size": tar_size,
                "records": len(self.keys),
                "suffixes": list(self._ids),
                "keys": self.keys,
                "starts": np.frombuffer(self.starts, dtype=np.int64),
                "members": np.frombuffer(self.members, dtype=np.int64),
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )


def from_members(members: Sequence[Tuple[str, str, int, int]]) -> TarIndex:
    """The index of ``(key, suffix, offset, size)`` members in tar order (consecutive keys group)."""
    b = IndexBuilder()
    key, run = None, []  # type: ignore[var-annotated]
    for k, suffix, offset, size in members:
        if k != key and key is not None:
            b.add(key, run)
            run = []
        key = k
        run.append((suffix, offset, size))
    if key is not None:
        b.add(key, run)
    return b.index()


def decode(data: bytes, tar_size: int, records: int) -> TarIndex:
    """Parse and check an index against its part's size and record count; ValueError says why not."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"not a version {VERSION} {FORMAT}")
    if doc.get("tar_size") != tar_size or doc.get("records") != records:
        raise ValueError(
            f"it describes {doc.get('records')} records in {doc.get('tar_size')} bytes, the part has"
            f" {records} records in {tar_size} bytes"
        )
    keys, starts, suffixes, flat = (doc.get(k) for k in ("keys", "starts", "suffixes", "members"))
    if not all(isinstance(v, list) for v in (keys, starts, suffixes, flat)):
        raise ValueError("a field is missing")
    if len(keys) != records:  # type: ignore[arg-type]
        raise ValueError(f"it has {len(keys)} keys for {records} records")  # type: ignore[arg-type]
    if not all(isinstance(v, str) for v in keys + suffixes):  # type: ignore[operator]
        raise ValueError("keys and suffixes must be strings")
    try:
        st = np.asarray(starts, dtype=np.int64)
        mem = np.asarray(flat, dtype=np.int64).reshape(-1, 3)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"starts and members must be integers ({e})") from e
    _check(st, mem, len(keys), len(suffixes), tar_size)  # type: ignore[arg-type]
    cols = [_int64s(mem[:, k]) for k in range(3)]
    return TarIndex(keys, _int64s(st), suffixes, *cols)  # type: ignore[arg-type]


def _int64s(a: np.ndarray) -> "array[int]":
    out = array("q")
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return out


def _check(starts: np.ndarray, mem: np.ndarray, records: int, suffixes: int, tar_size: int) -> None:
    if len(starts) != records + 1 or starts[0] != 0 or starts[-1] != len(mem) or np.any(np.diff(starts) < 0):
        raise ValueError("its record starts do not cover its members")
    sid, off, size = mem[:, 0], mem[:, 1], mem[:, 2]
    if np.any((sid < 0) | (sid >= suffixes)) or np.any(size < 0):
        raise ValueError("a member has a bad suffix or size")
    # each member's data follows its own 512-byte header, after the previous member's padded data
    ends = off + -(-size // _BLOCK) * _BLOCK
    if len(mem) and (
        np.any(off % _BLOCK) or off[0] < _BLOCK or np.any(off[1:] < ends[:-1] + _BLOCK) or ends[-1] > tar_size
    ):
        raise ValueError("its member offsets are not those of a tar of this size")
