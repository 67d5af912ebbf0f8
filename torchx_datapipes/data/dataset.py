"""``OutputDataset``: a committed output as a sharded, shuffled, resumable ``IterableDataset``.

See docs/reader.md for the semantics (epoch order, the plan, ranks' and workers' spans, ``even``,
mid-epoch and elastic resume). The object holds plain data only (parts, chunk sizes, the plan),
never an open file or filesystem, so DataLoader workers of every start method can unpickle it.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch.utils.data

from torchx_datapipes.data import _args
from torchx_datapipes.data._columns import check_columns_exist
from torchx_datapipes.data._order import EpochOrder, distinct
from torchx_datapipes.data._parts import Part, load_parts
from torchx_datapipes.data._plan import Interval, pieces, plan_len, rank_span, split_span
from torchx_datapipes.data._prefetch import read_ahead
from torchx_datapipes.data._state import EPOCH_KEYS, VERSION, chunks_digest, plan_from_json, plan_to_json
from torchx_datapipes.data._streams import ChunkStream, OpenStream, gather
from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats.chunks import Chunk, PartFormat, ReadOptions, Record
from torchx_datapipes.formats.parquet import reader as _parquet
from torchx_datapipes.formats.records import Columns
from torchx_datapipes.formats.registry import part_reader

if TYPE_CHECKING:
    from torchx_datapipes.data.mapstyle import OutputMapDataset
    from torchx_datapipes.data.node import OutputNode

PAD_FIELD = "__pad__"
Todo = List[Tuple[int, int, bool]]  # (first position, end position, is padding)
Segments = Iterator[Tuple[Chunk, bool]]


def _worker() -> Tuple[int, int]:
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def _gather(cache: Mapping[int, Chunk], chunk_ids: List[int], rows: List[int]) -> Chunk:
    """The records at ``(chunk_ids[k], rows[k])``, in that order."""
    first = cache[chunk_ids[0]]
    if isinstance(first, Columns):
        if len(cache) == 1:
            return first.take(rows)
        if all(isinstance(ch, Columns) and ch.names == first.names for ch in cache.values()):
            cols = tuple(
                [cache[c].values[k][r] for c, r in zip(chunk_ids, rows)]  # type: ignore[union-attr]
                for k in range(len(first.names))
            )
            return Columns(first.names, cols, len(rows))
    # records, or columns of different names (tar parts with other members) mixed with records
    recs = {c: list(ch.records()) if isinstance(ch, Columns) else ch for c, ch in cache.items()}
    return [recs[c][r] for c, r in zip(chunk_ids, rows)]


def all_chunk_sizes(fmt: PartFormat, parts: Sequence[Part], opts: ReadOptions) -> List[List[int]]:
    """Each part's chunk sizes; Parquet footers are fetched by a few threads (remote latency)."""
    if len(parts) <= 1:
        return [fmt.chunk_sizes(p, opts) for p in parts]
    with ThreadPoolExecutor(max_workers=min(8, len(parts)), thread_name_prefix="tdp-footers") as pool:
        return list(pool.map(lambda p: fmt.chunk_sizes(p, opts), parts))


class OutputDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """The records of a committed ``transform`` or ``split`` output (one split), for training.

    Args:
        url: the output directory (local path or any fsspec URL) holding ``_SUCCESS``.
        split: the split to read of a ``split`` output (required there, refused elsewhere).
        shuffle: permute chunks, then records within windows of ``shuffle_window`` records.
        seed: with ``epoch``, decides the order; the same seed repeats it.
        even: "none" (every record once; ranks' counts differ by at most one), "pad" (repeat the
            plan's first records so every rank has the same count; every record gets a bool
            ``__pad__``) or "drop" (drop the last ``R % world_size`` records of the epoch).
        shuffle_window: records shuffled together by an exact permutation; default: about
            32 MB of the stored parts, between 1024 and 16384 records (a window is decoded whole
            before its first record is served).
        columns: read only these fields (Parquet: column projection).
        rank, world_size: this rank and the number of ranks; default torch.distributed's if it
            is initialised, else 0 and 1.
        storage_options: fsspec options (credentials, endpoint, ...).
        cache_dir: copy each part here once (atomic rename, size checked) and read the copy.
        read_ahead: chunks read and decoded ahead by a background thread per worker (0: inline).
    """

    def __init__(
        self,
        url: str,
        split: Optional[str] = None,
        *,
        shuffle: bool = False,
        seed: int = 0,
        even: str = "none",
        shuffle_window: Optional[int] = None,
        columns: Optional[Sequence[str]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        storage_options: Optional[Dict[str, Any]] = None,
        cache_dir: Optional[str] = None,
        read_ahead: int = 2,
    ) -> None:
        super().__init__()
        _args.check_location(url, split, storage_options, cache_dir)
        if not isinstance(shuffle, bool):
            raise ReadError(f"shuffle={shuffle!r}: expected True or False")
        self.seed = _args.check_int("seed", seed, 0)
        window = _args.check_window(shuffle_window)
        self.read_ahead = _args.check_int("read_ahead", read_ahead, 0)
        self.even = _args.check_even(even)
        self.shuffle = shuffle
        self.rank, self.world_size = _args.resolve_layout(rank, world_size)
        self.url, self.split = url, split
        self._opts = ReadOptions(storage_options, cache_dir, _args.check_columns(columns))
        self._format, parts = load_parts(url, split, storage_options)
        self._parts: Tuple[Part, ...] = tuple(parts)
        check_columns_exist(self._format, parts, self._opts)
        per_part = all_chunk_sizes(part_reader(self._format), parts, self._opts)
        self._chunks: Tuple[Tuple[int, int], ...] = tuple(
            (pi, ci) for pi, sizes in enumerate(per_part) for ci in range(len(sizes))
        )
        self._chunk_sizes: Tuple[int, ...] = tuple(n for sizes in per_part for n in sizes)
        self._chunks_digest = chunks_digest(self._chunk_sizes)  # in every state (once: states are frequent)
        self.shuffle_window = (
            window if window is not None else _args.auto_window(sum(p.size for p in parts), self.num_records)
        )
        self._epoch = 0
        self._plan: Optional[List[Interval]] = None  # None: all of [0, N)
        self._resume: Optional[Dict[str, Any]] = None  # a worker state to resume at the next __iter__
        self._yielded = 0
        self._iter_worker: Optional[Tuple[int, int]] = None

    # ---- sizes ---------------------------------------------------------------------------

    @property
    def num_records(self) -> int:
        """Records in the selected split (or output), from the manifest."""
        return sum(p.records for p in self._parts)

    @property
    def epoch(self) -> int:
        return self._epoch

    def _current_plan(self) -> List[Interval]:
        n = self.num_records
        return list(self._plan) if self._plan is not None else ([(0, n)] if n else [])

    def __len__(self) -> int:
        """This rank's record count for the current epoch (pads included in "pad" mode)."""
        a, b = rank_span(plan_len(self._current_plan()), self.world_size, self.rank, self.even)
        return b - a

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its order and a full plan); the same epoch keeps a loaded resume state."""
        _args.check_int("epoch", epoch, 0)
        if epoch != self._epoch:
            self._epoch, self._plan, self._resume = epoch, None, None

    # ---- iteration -----------------------------------------------------------------------

    def _span(self, worker: int, workers: int) -> Tuple[int, int]:
        a, b = rank_span(plan_len(self._current_plan()), self.world_size, self.rank, self.even)
        return split_span(a, b - a, workers, worker)

    def __iter__(self) -> Iterator[Record]:
        worker, workers = _worker()
        return self._iterate(worker, workers)

    def _iterate(self, worker: int, workers: int) -> Iterator[Record]:
        s, e = self._span(worker, workers)
        start = s
        if self._resume is not None:
            self._check_layout(self._resume, worker, workers)
            start = min(s + int(self._resume["yielded"]), e)
            self._resume = None
        self._iter_worker, self._yielded = (worker, workers), start - s
        plan = self._current_plan()
        order = EpochOrder(
            self._chunk_sizes,
            seed=self.seed,
            epoch=self._epoch,
            shuffle=self.shuffle,
            window=self.shuffle_window,
        )
        todo = pieces(plan, start, e)
        for segment, pad in read_ahead(lambda: self._segments(order, todo), self.read_ahead):
            recs = segment.records() if isinstance(segment, Columns) else iter(segment)
            for rec in recs:
                if self.even == "pad":
                    rec = {**rec, PAD_FIELD: pad}
                self._yielded += 1
                yield rec

    def _segments(self, order: EpochOrder, todo: Todo) -> Segments:
        """Each segment's records (or columns) in epoch order, with its pad flag."""
        fmt = part_reader(self._format)
        if hasattr(fmt, "stream_chunk"):
            yield from self._streamed(fmt, order, todo)
            return
        cache: Dict[int, Chunk] = {}
        for a, b, pad in todo:
            for sa, sb in order.segments(a, b):
                chunk_ids, rows = order.locate(sa, sb)
                needed = distinct(chunk_ids)
                cache = {c: cache[c] if c in cache else self._read_chunk(fmt, c) for c in needed}
                yield _gather(cache, chunk_ids.tolist(), rows.tolist()), pad

    def _streamed(
        self, fmt: Any, order: EpochOrder, todo: List[Tuple[int, int, bool]]
    ) -> Iterator[Tuple[Chunk, bool]]:
        """As ``_segments``, decoding chunks progressively (Parquet): see ``_streams.py``."""
        streams: Dict[int, ChunkStream] = {}
        try:
            for a, b, pad in todo:
                for sa, sb in order.segments(a, b):
                    step = sb - sa if self.shuffle else _parquet.STREAM_ROWS  # in order: serve as decoded
                    for ca in range(sa, sb, step):
                        chunk_ids, rows = order.locate(ca, min(ca + step, sb))
                        for c in distinct(chunk_ids):
                            if c not in streams:
                                streams[c] = ChunkStream(
                                    self._opener(fmt, c), int(rows[chunk_ids == c].min())
                                )
                        yield gather(streams, chunk_ids, rows), pad
        finally:
            for st in streams.values():
                st.close()

    def _opener(self, fmt: Any, chunk: int) -> OpenStream:
        pi, ci = self._chunks[chunk]
        part, size = self._parts[pi], self._chunk_sizes[chunk]
        return lambda start: fmt.stream_chunk(part, ci, start, size, self._opts)

    def _read_chunk(self, fmt: Any, chunk: int) -> Chunk:
        pi, ci = self._chunks[chunk]
        out: Chunk = fmt.read_chunk(self._parts[pi], ci, self._opts)
        return out

    # ---- state ---------------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """This worker's progress in the epoch (JSON-able; see docs/reader.md)."""
        worker, workers = self._iter_worker or _worker()
        yielded = self._yielded if self._resume is None else int(self._resume["yielded"])
        return {
            "version": VERSION,
            **self._epoch_state(),
            "plan": plan_to_json(self._current_plan()),
            "world_size": self.world_size,
            "rank": self.rank,
            "num_workers": workers,
            "worker": worker,
            "yielded": yielded,
        }

    def _epoch_state(self) -> Dict[str, Any]:
        return {
            "epoch": self._epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "shuffle_window": self.shuffle_window,
            "even": self.even,
            "num_records": self.num_records,
            "chunks": self._chunks_digest,
        }

    def _check_epoch_keys(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != VERSION:
            raise ReadError(
                f"state version {state.get('version')!r} is not {VERSION}: not an OutputDataset state, or"
                " one saved by another torchx_datapipes version, whose epoch order may differ; start"
                " the epoch afresh (set_epoch) instead of resuming it"
            )
        mine = self._epoch_state()
        for key in EPOCH_KEYS:
            if key != "epoch" and state.get(key) != mine[key]:
                fix = (
                    "the output's parts are cut into other chunks than in the checkpointed run (the"
                    " output was rewritten, or another torchx_datapipes version read it), so the epoch"
                    " order differs; start the epoch afresh (set_epoch) instead of resuming it"
                    if key == "chunks"
                    else "create the dataset with the arguments of the checkpointed run"
                )
                raise ReadError(
                    f"state has {key}={state.get(key)!r} but this dataset has {key}={mine[key]!r}: {fix}"
                )

    def _check_layout(self, state: Mapping[str, Any], worker: int, workers: int) -> None:
        mine = {"world_size": self.world_size, "rank": self.rank, "num_workers": workers, "worker": worker}
        diff = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if diff:
            raise ReadError(
                f"a worker state of another layout (state vs this loader: {diff}): to resume on a"
                " different world size or number of workers, merge every rank's state with"
                " torchx_datapipes.data.merge_states(...) and load the merged state"
            )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume a worker state (same layout) or a merged state (any layout)."""
        self._check_epoch_keys(state)
        plan = plan_from_json(state["plan"], self.num_records)
        if "rank" in state:
            self._check_layout(state, *_worker())
            self._resume = dict(state)
        else:
            self._resume = None
        self._epoch, self._plan, self._yielded = int(state["epoch"]), plan, 0

    # ---- other views ---------------------------------------------------------------------

    @classmethod
    def map_style(
        cls,
        url: str,
        split: Optional[str] = None,
        *,
        columns: Optional[Sequence[str]] = None,
        storage_options: Optional[Dict[str, Any]] = None,
        cache_dir: Optional[str] = None,
    ) -> "OutputMapDataset":
        """The same records by global index (unit order), for samplers and random access."""
        from torchx_datapipes.data.mapstyle import OutputMapDataset

        return OutputMapDataset(
            url, split, columns=columns, storage_options=storage_options, cache_dir=cache_dir
        )

    def node(self) -> "OutputNode":
        """A ``torchdata.nodes`` source of this rank's records in one process."""
        from torchx_datapipes.data.node import OutputNode

        return OutputNode(self)

    def __repr__(self) -> str:
        return (
            f"OutputDataset({self.url!r}, split={self.split!r}, {self.num_records} records,"
            f" rank {self.rank}/{self.world_size}, epoch {self._epoch})"
        )
