"""A keyed exchange between two passes: rows written by key in one pass, read by partition in the next.

The one step that makes records of different ranks meet (dedup now; group-by and join later),
built on the engine's passes rather than on collectives, so it inherits their guarantees:

1. **Spill.** A task of the producing pass (an input unit, or a partition of an earlier
   exchange) sends each row to partition ``partition_of(key, P)`` by writing, per partition that
   gets rows, one spill file ``OUT/_exchange/<stage>/p-PPPPP/<task>.bin`` (atomically: temp name,
   then rename). The files are listed, with size and checksum, in the task's commit record, so
   they are committed with the task: a task killed before its commit record is redone, and
   rewrites the same names with the same bytes (the columns' raw bytes after a small JSON header:
   deterministic, unlike ``.npz``, whose zip entries carry the time).
2. **Gather.** The consuming pass runs over :meth:`Stage.tasks`, one ``Unit``-like task per
   partition (``Engine.run_pass(name, fn, tasks)``), claimed, committed and resumed like input
   units, exactly once. A task reads only the spill files that the *committed* records of the
   producing pass list (never a directory listing, which could hold a stale file of another job),
   in producer order, so what it sees does not depend on ``-j`` or timing.

Memory: a task holds one partition (``1/P`` of the stage's rows, for well-spread keys); a producer
holds its own rows. No stage runs on one rank only. The exchange directory is removed by the op
at its commit (``remove``); until then a relaunch resumes from the committed spill files.

Non-goals: no network transport (the files go through the output's filesystem, local or fsspec),
no compression, no spilling of one task's own rows in several rounds.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import FileSum, write_summed
from torchx_datapipes.io.fs import fs_and_path, join, read_bytes
from torchx_datapipes.io.layout import EXCHANGE_DIR

MAGIC = b"TDPX1\n"  # spill file format version 1: MAGIC, u64 header length, JSON header, column bytes
Files = Dict[int, List[str]]  # partition -> its spill files (relative to the output)
Schema = Tuple[Tuple[str, str], ...]  # (column, numpy dtype string), e.g. (("key", "<u8"), ("id", "<i8"))

_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of 64-bit values (a bijection): spreads sequential ids over partitions."""
    x = np.asarray(x).astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _C1
    x ^= x >> np.uint64(27)
    x *= _C2
    x ^= x >> np.uint64(31)
    return x


def partition_of(keys: np.ndarray, partitions: int) -> np.ndarray:
    """The partition (int64 in ``[0, partitions)``) of each 64-bit key; the same in every process."""
    return (mix64(keys) % np.uint64(partitions)).astype(np.int64)


def encode_columns(columns: Mapping[str, np.ndarray]) -> bytes:
    """One spill (or side) file's bytes: 1-d columns, each stored as its raw bytes after a JSON header."""
    arrays = [(name, np.ascontiguousarray(a)) for name, a in columns.items()]
    if any(a.ndim != 1 for _, a in arrays):
        raise ValueError(f"spill columns must be 1-d, got {[(n, a.shape) for n, a in arrays]}")
    header = orjson.dumps([[name, a.dtype.str, len(a)] for name, a in arrays])
    return b"".join([MAGIC, len(header).to_bytes(8, "little"), header, *(a.tobytes() for _, a in arrays)])


def decode_columns(data: bytes, url: str) -> Dict[str, np.ndarray]:
    """The columns of a spill file (``url`` names it in the error for a file that is not one)."""
    if not data.startswith(MAGIC):
        raise DatapipesError(
            f"{url} is not a spill file of this version (it starts {data[:8]!r}): it was changed or"
            " written by another version; remove the output's _exchange/ directory and relaunch"
        )
    n = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "little")
    pos = len(MAGIC) + 8
    header = orjson.loads(data[pos : pos + n])
    need = pos + n + sum(np.dtype(dtype).itemsize * length for _, dtype, length in header)
    if need != len(data):
        raise DatapipesError(
            f"{url} holds {len(data)} bytes, its header describes {need}: the file was cut or changed;"
            " remove the output's _exchange/ directory and relaunch"
        )
    out: Dict[str, np.ndarray] = {}
    offset = pos + n
    for name, dtype, length in header:
        dt = np.dtype(dtype)
        out[name] = np.frombuffer(data, dtype=dt, count=length, offset=offset)
        offset += dt.itemsize * length
    return out


@dataclass(frozen=True)
class ColumnLayout:
    """Where each column of a spill file lies: ``name -> (dtype, rows, byte offset)`` (for range reads)."""

    url: str
    columns: Dict[str, Tuple[np.dtype, int, int]]


def column_layout(fh: Any, url: str, size: int) -> ColumnLayout:
    """The layout of the spill file open as ``fh`` (``size`` bytes), from its header alone."""
    head = fh.read(len(MAGIC) + 8)
    if not head.startswith(MAGIC) or len(head) < len(MAGIC) + 8:
        raise DatapipesError(
            f"{url} is not a spill file of this version (it starts {head[:8]!r}): it was changed or"
            " written by another version; remove the output's _exchange/ directory and relaunch"
        )
    n = int.from_bytes(head[len(MAGIC) :], "little")
    offset = len(head) + n
    columns: Dict[str, Tuple[np.dtype, int, int]] = {}
    for name, dtype, length in orjson.loads(fh.read(n)):
        dt = np.dtype(dtype)
        columns[name] = (dt, int(length), offset)
        offset += dt.itemsize * int(length)
    if offset != size:
        raise DatapipesError(
            f"{url} holds {size} bytes, its header describes {offset}: the file was cut or changed;"
            " remove the output's _exchange/ directory and relaunch"
        )
    return ColumnLayout(url, columns)


def read_rows(fh: Any, layout: ColumnLayout, name: str, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of column ``name`` of the spill file open as ``fh``: one seek and read."""
    dt, length, offset = layout.columns[name]
    if not 0 <= start <= stop <= length:
        raise ValueError(f"{layout.url}: rows [{start}, {stop}) of column {name!r} outside [0, {length})")
    fh.seek(offset + start * dt.itemsize)
    data = fh.read((stop - start) * dt.itemsize)
    if len(data) != (stop - start) * dt.itemsize:
        raise DatapipesError(f"{layout.url} ended early (column {name!r}): remove _exchange/ and relaunch")
    return np.frombuffer(data, dtype=dt)


def write_columns(output: str, rel: str, columns: Mapping[str, np.ndarray]) -> FileSum:
    """Atomically write ``OUT/rel`` as a spill file; its size and checksum for the commit record."""
    return write_summed(output, rel, encode_columns(columns))


def read_columns(output: str, rel: str) -> Dict[str, np.ndarray]:
    url = join(output, rel)
    return decode_columns(read_bytes(url), url)


def empty_columns(schema: Schema) -> Dict[str, np.ndarray]:
    return {name: np.empty(0, dtype=dtype) for name, dtype in schema}


def concat_columns(parts: Sequence[Mapping[str, np.ndarray]], schema: Schema) -> Dict[str, np.ndarray]:
    if not parts:
        return empty_columns(schema)
    return {
        name: np.concatenate([p[name] for p in parts]).astype(dtype, copy=False) for name, dtype in schema
    }


@dataclass(frozen=True)
class Stage:
    """One keyed exchange: ``partitions`` partitions of rows with the columns of ``schema``."""

    output: str
    name: str  # a path component: [a-z0-9_]+
    partitions: int
    schema: Schema

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ValueError(f"exchange {self.name!r}: partitions must be >= 1, got {self.partitions}")

    @property
    def prefix(self) -> str:
        return f"{EXCHANGE_DIR}/{self.name}/"

    def rel(self, partition: int, producer: str) -> str:
        """``_exchange/<stage>/p-00003/<producer>.bin``, relative to the output."""
        return f"{self.prefix}p-{partition:05d}/{producer}.bin"

    def spill(self, producer: str, partition: np.ndarray, columns: Mapping[str, np.ndarray]) -> List[FileSum]:
        """Write each row to its partition (``partition[i]`` for row ``i``), in row order; one file per
        partition that gets rows. ``producer`` names the task (unique in the producing pass)."""
        names = [n for n, _ in self.schema]
        if sorted(columns) != sorted(names):
            raise ValueError(f"exchange {self.name!r}: columns {sorted(columns)}, expected {sorted(names)}")
        partition = np.asarray(partition, dtype=np.int64)
        if len(partition) and (partition.min() < 0 or partition.max() >= self.partitions):
            raise ValueError(f"exchange {self.name!r}: a partition outside [0, {self.partitions})")
        if not len(partition):
            return []
        order = np.argsort(partition, kind="stable")
        sorted_parts = partition[order]
        cols = {n: np.asarray(columns[n], dtype=d)[order] for n, d in self.schema}
        bounds = np.flatnonzero(np.r_[True, sorted_parts[1:] != sorted_parts[:-1], True])
        files = []
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if hi > lo:
                chunk = {n: c[lo:hi] for n, c in cols.items()}
                files.append(write_columns(self.output, self.rel(int(sorted_parts[lo]), producer), chunk))
        return files

    def files(self, metas: Sequence[Mapping[str, Any]]) -> Dict[int, List[str]]:
        """Partition -> its spill files, from the producing pass's commit records (producer order)."""
        out: Dict[int, List[str]] = {}
        for m in metas:
            for f in m.get(ms.FILES, []):
                rel = str(f[ms.FILE_PATH])
                if rel.startswith(self.prefix):
                    part = int(rel[len(self.prefix) :].split("/", 1)[0][len("p-") :])
                    out.setdefault(part, []).append(rel)
        return {p: sorted(v) for p, v in out.items()}

    def sizes(self, files: Mapping[int, List[str]], metas: Sequence[Mapping[str, Any]]) -> Dict[int, int]:
        size = {str(f[ms.FILE_PATH]): int(f[ms.FILE_SIZE]) for m in metas for f in m.get(ms.FILES, [])}
        return {p: sum(size.get(r, 0) for r in rels) for p, rels in files.items()}

    def tasks(self, sizes: Mapping[int, int] = {}) -> List[Unit]:  # noqa: B006 (read only)
        """One task per partition for ``Engine.run_pass(name, fn, tasks)``; ``sizes`` (bytes spilled to
        each) orders the dynamic claims largest first."""
        return [
            Unit(p, join(self.output, f"{self.prefix}p-{p:05d}"), int(sizes.get(p, 0)), format="jsonl")
            for p in range(self.partitions)
        ]

    def gather(self, partition: int, files: Mapping[int, List[str]]) -> Dict[str, np.ndarray]:
        """Every row spilled to ``partition`` by the committed producers, in producer then row order."""
        return concat_columns(
            [read_columns(self.output, rel) for rel in files.get(partition, [])], self.schema
        )

    def gather_all(self, files: Mapping[int, List[str]]) -> Dict[str, np.ndarray]:
        """Every row of every partition (for a table small enough for one task: see the callers)."""
        rels = [r for p in sorted(files) for r in files[p]]
        return concat_columns([read_columns(self.output, r) for r in rels], self.schema)


def remove(output: str) -> None:
    """Remove the output's exchange directory (all stages), once nothing reads it any more."""
    fs, root = fs_and_path(join(output, EXCHANGE_DIR))
    if fs.exists(root):
        fs.rm(root, recursive=True)
