"""``TokenDataset``: committed Megatron shards as packed windows with document and position ids.

It reads a ``tokenize`` output, or the output of a job written with ``--output_format megatron``
(e.g. a transform returning token ids): both list their shards in order in the manifest, the
tokenize op in its ``tokenize`` section, the format in its own (``formats/megatron``'s ``SECTION``).

The shards' documents, concatenated in order, are one token stream; item ``w`` is the window of
tokens ``[w * seq_len, (w + 1) * seq_len)`` (the last partial window is dropped), as three int64
tensors of length ``seq_len``: ``input_ids``, ``document_ids`` (the global index of each token's
document, so attention can be masked at document boundaries: FlexAttention's ``document_mask``,
varlen kernels) and ``position_ids`` (the token's position inside its document).

Windows are split like ``OutputDataset``'s records: the epoch's order (identity, or a permutation
of ``(seed, epoch)`` with ``shuffle=True``) is cut into one contiguous span per rank, then per
DataLoader worker, so every window is served exactly once per epoch; ``state_dict`` /
``load_state_dict`` resume mid-epoch (``StatefulDataLoader``). Every ``.idx`` is checked against the
checksum its commit recorded and every ``.bin`` byte is read through its block checksums
(``io/verify.py``). The object holds plain data only (no open file), so it pickles.

Non-goals: writing, windows that stop at document ends (pad or split per document yourself),
resume on another world size or number of workers, and a split's megatron output (one stream per
split: not read yet).
"""

import bisect
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np
import orjson
import torch
import torch.utils.data

from torchx_datapipes.data import _args
from torchx_datapipes.data._parts import read_success
from torchx_datapipes.data._plan import rank_span, split_span
from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats.megatron import SECTION as MEGATRON_SECTION
from torchx_datapipes.formats.megatron.index import MegatronIndex, decode_index
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import sum_bytes
from torchx_datapipes.io.confine import read_small
from torchx_datapipes.io.layout import block_sums_file
from torchx_datapipes.io.part import Part, confined
from torchx_datapipes.io.partfiles import read_into

STATE_VERSION = 1
_INDEXES_KEPT = 8  # parsed .idx files kept per process (windows in order touch one or two at a time)


@dataclass(frozen=True)
class Shard:
    """One committed shard: its ``.bin`` as a verified part, its ``.idx`` and its place in the stream."""

    bin: Part
    idx: Tuple[str, int, str]  # url, size, xxh3_128
    documents: int
    tokens: int
    first_document: int
    first_token: int
    # provenance (tokenize outputs only; None for a --output_format megatron output)
    input: Optional[str]
    line_offset: Optional[int]
    lines: Optional[str]  # url of the provenance file (document -> input line)


def _file_sums(url: str, manifest: Mapping[str, Any]) -> Dict[str, Mapping[str, Any]]:
    out: Dict[str, Mapping[str, Any]] = {}
    for unit in manifest.get(ms.UNITS, []):
        for f in unit.get(ms.FILES, []):
            out[confined(url, f.get(ms.FILE_PATH), f"unit {unit.get(ms.UNIT)} files entry")] = f
    return out


def _section(root: str, manifest: Mapping[str, Any]) -> Dict[str, Any]:
    """The manifest's list of shards: the tokenize op's section, or the megatron format's."""
    op = manifest.get(ms.OP)
    if op == "tokenize":
        return dict(manifest[ms.TOKENIZE])
    fmt = manifest.get(ms.OPTIONS, {}).get(ms.OPT_OUTPUT_FORMAT)
    if MEGATRON_SECTION not in manifest:
        raise ReadError(
            f"{root}/_SUCCESS is a {op} output written as {fmt!r}: TokenDataset reads Megatron shards, the"
            " output of datapipes.tokenize or of a job run with --output_format megatron; read this one"
            " with OutputDataset"
        )
    if op == "split":
        raise ReadError(
            f"{root} is a split's megatron output (one token stream per split), which TokenDataset does"
            " not read yet: write each split's records with a transform --output_format megatron instead"
        )
    return dict(manifest[MEGATRON_SECTION])


def load_shards(
    url: str, storage_options: Optional[Mapping[str, Any]] = None
) -> Tuple[Dict[str, Any], List[Shard]]:
    """``(the manifest's section listing the shards, the shards in stream order)`` of a committed
    tokenize or ``--output_format megatron`` output."""
    root = url.rstrip("/")
    manifest = read_success(root, storage_options)
    section = _section(root, manifest)
    files = _file_sums(root, manifest)

    def entry(rel: str) -> Mapping[str, Any]:
        if rel not in files:
            raise ReadError(f"{root}/_SUCCESS: {rel} has no 'files' entry (size, checksum); rerun the job")
        return files[rel]

    shards = []
    for s in section["shards"]:
        stem = confined(root, s["prefix"], "shard prefix")
        b, i, sums = entry(f"{stem}.bin"), entry(f"{stem}.idx"), entry(block_sums_file(f"{stem}.bin"))
        part = Part(
            f"{root}/{stem}.bin", f"{stem}.bin", int(b[ms.FILE_SIZE]), int(s["documents"]), None,
            (f"{root}/{sums[ms.FILE_PATH]}", int(sums[ms.FILE_SIZE]), str(sums[ms.FILE_XXH3])),
            str(b[ms.FILE_XXH3]), root,
        )  # fmt: skip
        provenance = "input" in s  # a tokenize output's
        shards.append(
            Shard(
                part,
                (f"{root}/{stem}.idx", int(i[ms.FILE_SIZE]), str(i[ms.FILE_XXH3])),
                int(s["documents"]),
                int(s["tokens"]),
                int(s["first_document"]),
                int(s["first_token"]),
                str(s["input"]) if provenance else None,
                int(s["line_offset"]) if provenance else None,
                f"{root}/{stem}.lines.json" if provenance else None,
            )  # fmt: skip
        )
    return section, shards


def _order(n: int, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.default_rng([seed, epoch]).permutation(n).astype(np.int64)


def _worker() -> Tuple[int, int]:
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class TokenDataset(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Windows of ``seq_len`` tokens of a committed ``tokenize`` output (or ``--output_format megatron``
    output), with document and position ids.

    Args:
        url: the output directory (local path or fsspec URL) holding ``_SUCCESS``.
        seq_len: tokens per window (the last partial window of the stream is dropped).
        shuffle: serve the windows in a permutation of ``(seed, epoch)`` (``set_epoch``).
        seed: with the epoch, decides the order.
        rank, world_size: default torch.distributed's if it is initialised, else 0 and 1.
        storage_options: fsspec options (credentials, endpoint, ...).
        cache_dir: copy each ``.bin`` here once (atomic, size checked) and read the copy.
    """

    def __init__(
        self,
        url: str,
        seq_len: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        storage_options: Optional[Dict[str, Any]] = None,
        cache_dir: Optional[str] = None,
    ) -> None:
        super().__init__()
        _args.check_location(url, None, storage_options, cache_dir)
        self.seq_len = _args.check_int("seq_len", seq_len, 1)
        if not isinstance(shuffle, bool):
            raise ReadError(f"shuffle={shuffle!r}: expected True or False")
        self.shuffle, self.seed = shuffle, _args.check_int("seed", seed, 0)
        self.rank, self.world_size = _args.resolve_layout(rank, world_size)
        self.url, self.storage_options, self.cache_dir = url, storage_options, cache_dir
        section, shards = load_shards(url, storage_options)
        self.all_shards: Tuple[Shard, ...] = tuple(shards)  # every shard (provenance), in stream order
        self.shards: Tuple[Shard, ...] = tuple(s for s in shards if s.tokens > 0)  # those windows read
        self._starts = [s.first_token for s in self.shards]
        self.num_tokens = int(section["tokens"])
        self.num_documents = int(section["documents"])
        self.eos_id: Optional[int] = section.get("eos_id")
        self.num_windows = self.num_tokens // self.seq_len
        self._epoch = 0
        self._resume: Optional[Dict[str, Any]] = None
        self._yielded = 0
        self._iter_worker: Optional[Tuple[int, int]] = None
        self._indexes: Dict[int, Tuple[MegatronIndex, np.ndarray]] = {}  # per process; not pickled

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_indexes"] = {}
        return state

    # ---- sizes and epochs ----------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its window order); the same epoch keeps a loaded resume state."""
        _args.check_int("epoch", epoch, 0)
        if epoch != self._epoch:
            self._epoch, self._resume = epoch, None

    def _span(self, worker: int, workers: int) -> Tuple[int, int]:
        a, b = rank_span(self.num_windows, self.world_size, self.rank, "none")
        return split_span(a, b - a, workers, worker)

    def __len__(self) -> int:
        """This rank's windows per epoch."""
        a, b = rank_span(self.num_windows, self.world_size, self.rank, "none")
        return b - a

    # ---- reading -------------------------------------------------------------------------

    def _index(self, k: int) -> Tuple[MegatronIndex, np.ndarray]:
        """Shard ``k``'s index (checked against its committed checksum) and its documents' token starts."""
        if k not in self._indexes:
            url, size, digest = self.shards[k].idx
            data = read_small(url, self.storage_options, self.shards[k].bin.root)
            if len(data) != size or sum_bytes(data) != digest:
                raise ReadError(
                    f"{url} does not match the size and checksum its commit recorded: the output was"
                    " modified after the commit; rerun the tokenize job with --overwrite True"
                )
            index = decode_index(data, url)
            starts = np.zeros(len(index.lengths) + 1, dtype=np.int64)
            np.cumsum(index.lengths, out=starts[1:])
            if len(self._indexes) >= _INDEXES_KEPT:
                self._indexes.pop(next(iter(self._indexes)))
            self._indexes[k] = (index, starts)
        return self._indexes[k]

    def window(self, w: int) -> Dict[str, torch.Tensor]:
        """Window ``w`` of the stream (any ``0 <= w < num_windows``), read and verified."""
        if not 0 <= w < self.num_windows:
            raise IndexError(f"window {w} of {self.num_windows}")
        a, b = w * self.seq_len, (w + 1) * self.seq_len
        ids, docs, pos = [], [], []
        k = bisect.bisect_right(self._starts, a) - 1
        while a < b:
            shard = self.shards[k]
            index, starts = self._index(k)
            lo, hi = a - shard.first_token, min(b, shard.first_token + shard.tokens) - shard.first_token
            size = index.dtype.itemsize
            raw = read_into(shard.bin, [(lo * size, hi * size)], self.storage_options, self.cache_dir)[0]
            ids.append(raw.view(index.dtype).astype(np.int64))
            t = np.arange(lo, hi, dtype=np.int64)
            d = np.searchsorted(starts, t, side="right") - 1
            docs.append(d + shard.first_document)
            pos.append(t - starts[d])
            a += hi - lo
            k += 1
        return {
            "input_ids": torch.from_numpy(np.concatenate(ids)),
            "document_ids": torch.from_numpy(np.concatenate(docs)),
            "position_ids": torch.from_numpy(np.concatenate(pos)),
        }

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        worker, workers = _worker()
        s, e = self._span(worker, workers)
        start = s
        if self._resume is not None:
            self._check_layout(self._resume, worker, workers)
            start = min(s + int(self._resume["yielded"]), e)
            self._resume = None
        self._iter_worker, self._yielded = (worker, workers), start - s
        order = _order(self.num_windows, self.seed, self._epoch, self.shuffle)
        return self._serve(order, start, e)

    def _serve(self, order: np.ndarray, start: int, end: int) -> Iterator[Dict[str, torch.Tensor]]:
        for i in range(start, end):
            item = self.window(int(order[i]))
            self._yielded += 1
            yield item

    def source(self, document: int) -> Tuple[str, int]:
        """``(input file, line)`` of a global document index (the shard's provenance file)."""
        if not 0 <= document < self.num_documents:
            raise IndexError(f"document {document} of {self.num_documents}")
        shards = [s for s in self.all_shards if s.documents]
        shard = shards[bisect.bisect_right([s.first_document for s in shards], document) - 1]
        if shard.lines is None or shard.input is None or shard.line_offset is None:
            raise ReadError(
                f"{self.url} records no document's input line: only a tokenize output has provenance"
                " (a job writing --output_format megatron maps records, not lines, to documents)"
            )
        doc = orjson.loads(read_small(shard.lines, self.storage_options, shard.bin.root))
        return shard.input, shard.line_offset + int(doc["lines"][document - shard.first_document])

    # ---- state ---------------------------------------------------------------------------

    def _epoch_state(self) -> Dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "epoch": self._epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "seq_len": self.seq_len,
            "num_tokens": self.num_tokens,
        }

    def state_dict(self) -> Dict[str, Any]:
        """This worker's progress in the epoch (JSON-able)."""
        worker, workers = self._iter_worker or _worker()
        yielded = self._yielded if self._resume is None else int(self._resume["yielded"])
        return {
            **self._epoch_state(),
            "world_size": self.world_size,
            "rank": self.rank,
            "num_workers": workers,
            "worker": worker,
            "yielded": yielded,
        }

    def _check_layout(self, state: Mapping[str, Any], worker: int, workers: int) -> None:
        mine = {"world_size": self.world_size, "rank": self.rank, "num_workers": workers, "worker": worker}
        diff = {k: (state.get(k), v) for k, v in mine.items() if state.get(k) != v}
        if diff:
            raise ReadError(
                f"a TokenDataset state of another layout (state vs this loader: {diff}): resume with the"
                " world size and DataLoader workers of the checkpointed run"
            )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume a worker state saved by ``state_dict`` (same dataset arguments and layout)."""
        mine = self._epoch_state()
        for key, value in mine.items():
            if key != "epoch" and state.get(key) != value:
                raise ReadError(
                    f"state has {key}={state.get(key)!r} but this TokenDataset has {key}={value!r}:"
                    " create the dataset with the arguments (and output) of the checkpointed run"
                )
        self._check_layout(state, *_worker())
        self._epoch, self._resume, self._yielded = int(state["epoch"]), dict(state), 0

    def __repr__(self) -> str:
        return (
            f"TokenDataset({self.url!r}, seq_len={self.seq_len}, {self.num_windows} windows of"
            f" {self.num_tokens} tokens, rank {self.rank}/{self.world_size}, epoch {self._epoch})"
        )
