"""The duplicate graph of the dedup op, built across ranks through keyed exchanges (``runner/exchange.py``).

Every step is a pass over the partitions of an exchange (``P`` = ``--partitions``), so each runs
on every rank, is committed per partition and resumes; ids are ``unit << 32 | line`` (input order).

near:

- ``pairs`` over ``bands`` (band key, id): the pairs of ids sharing a band key
  (:func:`~torchx_datapipes.dedup.bucket_pairs`), sent to the partition of the smaller id (``cand``);
- ``verify`` over ``cand``: distinct candidate pairs, their exact Jaccard from the shingle rows
  (each unit's ``_exchange/shingles/u-UUUUU.bin``, only the byte ranges of the ids involved:
  ``runner/shingle_rows.py``); the pairs at
  or above ``--threshold`` (all of them with ``--verify false``) are the partition's edge shard
  (``edges``);
- rounds ``ccN`` over the edge shards and ``labN`` over the node partitions: min-label
  propagation with root hooking (:func:`~torchx_datapipes.dedup.propagate`), the proposals
  exchanged by node and applied with ``min`` (``apply_proposals``), then one pointer-jumping step
  against the previous round's labels; the rounds stop when no label changed (summed from the
  ``labN`` commit records, the same on every rank). Labels are stored only for nodes whose label
  is not themselves, partitioned by node (``labelsN``). Each rank reads the previous round's whole
  label table (touched ids only: 16 bytes each) before a round;
- ``route`` over the final label partitions: each duplicate, its representative (the smallest id
  of its component) and their exact Jaccard, sent to its input unit (``final``) and, by
  representative, to ``members``; ``sizes`` over ``members``: the cluster sizes.

exact: ``exact`` over ``exact`` (sha256 key, id): :func:`~torchx_datapipes.dedup.first_ids` per
key (all rows of a key meet in one partition), duplicates sent to ``final`` (Jaccard 1.0).
"""

from typing import Any, Callable, Dict, List, Sequence, Set, Tuple

import numpy as np

from torchx_datapipes.dedup import apply_proposals, bucket_pairs, first_ids, jaccard, propagate
from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.runner import exchange
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.exchange import Files, Stage
from torchx_datapipes.runner.shingle_rows import ShingleRows
from torchx_datapipes.runner.textfield import ID_SHIFT

MAX_ROUNDS = 64
TOP = 10
_I8, _U8, _F8 = "<i8", "<u8", "<f8"


def _producer(task: Unit) -> str:
    return f"t-{task.index:05d}"


class Graph:
    """The exchange stages and the passes over them; ``final_rows(unit)`` is what the write pass reads."""

    def __init__(
        self, output: str, parts: int, units: int, method: str, threshold: float, verify: bool
    ) -> None:
        self.output, self.parts, self.method, self.threshold, self.verify = (
            output,
            parts,
            method,
            threshold,
            verify,
        )
        s = lambda name, schema, n=parts: Stage(output, name, n, schema)  # noqa: E731
        self.bands = s("bands", (("key", _U8), ("id", _I8)))
        self.exact = s("exact", (("key", "|S32"), ("id", _I8)))
        self.cand = s("cand", (("a", _I8), ("b", _I8)))
        self.edges = s("edges", (("a", _I8), ("b", _I8), ("jaccard", _F8)))
        self.final = s("final", (("id", _I8), ("rep", _I8), ("jaccard", _F8)), units)
        self.members = s("members", (("rep", _I8),))
        self.stage = lambda name: s(name, (("node", _I8), ("label", _I8)))
        self.inbox: Files = {}  # the current pass's input files by partition (set before its workers fork)
        self.labels_stage: Stage = self.stage("labels0")
        self.next_stage: Stage = self.stage("labels1")
        self.labels_files: Files = {}  # the previous round's label files
        self.table: Dict[int, int] = {}  # the previous round's whole label table
        self.final_files: Files = {}
        self.top: Set[int] = set()  # the representatives of the largest clusters (the report's examples)
        self.rounds = 0
        self.shingles = ShingleRows(output)  # the map pass's shingle rows, read by id

    # -- driving ----------------------------------------------------------------------------
    def _pass(
        self,
        ctx: PassContext,
        name: str,
        fn: Callable[..., Dict[str, Any]],
        stage: Stage,
        producers: Sequence[Dict[str, Any]],
    ) -> List[Dict[str, Any]]:
        self.inbox = stage.files(producers)
        ctx.run_pass(name, fn, stage.tasks(stage.sizes(self.inbox, producers)))
        ctx.barrier()
        return ctx.load_metas(name)

    def run(self, ctx: PassContext, map_metas: Sequence[Dict[str, Any]]) -> None:
        if self.method == "exact":
            done = self._pass(ctx, "exact", self.exact_task, self.exact, map_metas)
            self.final_files = self.final.files(done)
            self.top = {r for r, _ in self.top_clusters(done)}
            return
        pairs = self._pass(ctx, "pairs", self.pairs_task, self.bands, map_metas)
        edges = self._pass(ctx, "verify", self.verify_task, self.cand, pairs)
        labels: Sequence[Dict[str, Any]] = []
        for r in range(1, MAX_ROUNDS + 1):
            self.rounds = r
            self.labels_files = self.labels_stage.files(labels)
            self.table = self._table(self.labels_stage, self.labels_files)
            props = self._pass(ctx, f"cc{r}", self.propagate_task, self.edges, edges)
            self.next_stage = self.stage(f"labels{r}")
            labels = self._pass(ctx, f"lab{r}", self.labels_task, self.stage(f"prop{r}"), props)
            self.labels_stage = self.next_stage
            if not sum(int(m[ms.CHANGED]) for m in labels):
                break
        else:
            raise DatapipesError(f"connected components did not converge in {MAX_ROUNDS} rounds")
        routed = self._pass(ctx, "route", self.route_task, self.labels_stage, labels)
        sized = self._pass(ctx, "sizes", self.sizes_task, self.members, routed)
        self.final_files = self.final.files(routed)
        self.top = {r for r, _ in self.top_clusters(sized)}

    def final_rows(self, unit_index: int) -> Dict[str, np.ndarray]:
        return self.final.gather(unit_index, self.final_files)

    def totals(self, ctx: PassContext) -> Dict[str, Any]:
        """The counts for the manifest, summed over the committed tasks (rank 0, at the commit)."""
        counted = ctx.load_metas("exact") if self.method == "exact" else ctx.load_metas("verify")
        sized = ctx.load_metas("exact") if self.method == "exact" else ctx.load_metas("sizes")
        tops = self.top_clusters(sized)
        histogram: Dict[int, int] = {}
        for m in sized:
            for s, n in m[ms.CLUSTER_SIZES].items():
                histogram[int(s)] = histogram.get(int(s), 0) + int(n)
        return {
            ms.CLUSTER_SIZES: {str(s): histogram[s] for s in sorted(histogram)},
            ms.CANDIDATE_PAIRS: sum(int(m[ms.CANDIDATE_PAIRS]) for m in counted),
            ms.VERIFIED_PAIRS: sum(int(m[ms.VERIFIED_PAIRS]) for m in counted),
            ms.CLUSTERS: sum(int(m[ms.CLUSTERS]) for m in sized),
            ms.LARGEST_CLUSTER: max((int(m[ms.LARGEST_CLUSTER]) for m in sized), default=0),
            ms.REMOVED: sum(int(m[ms.REMOVED]) for m in sized),
            ms.LARGEST_CLUSTERS: tops,
        }

    @staticmethod
    def top_clusters(sized: Sequence[Dict[str, Any]]) -> List[Tuple[int, int]]:
        """The ``TOP`` largest clusters ``(representative, size)``, largest first, then by id."""
        tops = sorted(
            ((int(r), int(n)) for m in sized for r, n in m[ms.LARGEST_CLUSTERS]), key=lambda t: (-t[1], t[0])
        )
        return tops[:TOP]

    def jaccards(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        rows = self.shingles.rows(np.r_[a, b])
        return np.array([jaccard(rows[x], rows[y]) for x, y in zip(a.tolist(), b.tolist())], dtype=np.float64)

    # -- near passes ----------------------------------------------------------------------------
    def pairs_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        rows = self.bands.gather(task.index, self.inbox)
        pairs = bucket_pairs(rows["key"], rows["id"])
        a, b = pairs[:, 0], pairs[:, 1]
        files = self.cand.spill(_producer(task), exchange.partition_of(a, self.parts), {"a": a, "b": b})
        return {ms.PAIRS: len(pairs), ms.FILES: files}

    def verify_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        rows = self.cand.gather(task.index, self.inbox)
        pairs = (
            np.unique(np.stack([rows["a"], rows["b"]], axis=1), axis=0)
            if len(rows["a"])
            else np.empty((0, 2), np.int64)
        )
        a, b = pairs[:, 0], pairs[:, 1]
        jac = self.jaccards(a, b) if self.verify else np.full(len(a), np.nan)
        keep = jac >= self.threshold if self.verify else np.ones(len(a), dtype=bool)
        cols = {"a": a[keep], "b": b[keep], "jaccard": jac[keep]}
        files = self.edges.spill(_producer(task), np.full(int(keep.sum()), task.index), cols)
        return {ms.CANDIDATE_PAIRS: len(pairs), ms.VERIFIED_PAIRS: int(keep.sum()), ms.FILES: files}

    def _table(self, stage: Stage, files: Files) -> Dict[int, int]:
        rows = stage.gather_all(files)
        return dict(zip(rows["node"].tolist(), rows["label"].tolist()))

    def propagate_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        rows = self.edges.gather(task.index, self.inbox)
        props = propagate(zip(rows["a"].tolist(), rows["b"].tolist()), self.table)
        node = np.fromiter(props.keys(), dtype=np.int64, count=len(props))
        label = np.fromiter(props.values(), dtype=np.int64, count=len(props))
        out = self.stage(f"prop{self.rounds}")
        files = out.spill(
            _producer(task), exchange.partition_of(node, self.parts), {"node": node, "label": label}
        )
        return {ms.PROPOSALS: len(props), ms.FILES: files}

    def labels_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        mine = self._table(self.labels_stage, {task.index: self.labels_files.get(task.index, [])})
        got = self.stage(f"prop{self.rounds}").gather(task.index, self.inbox)
        props: Dict[int, int] = {}
        for x, m in zip(got["node"].tolist(), got["label"].tolist()):
            if m < props.get(x, x):
                props[x] = m
        new, changed = apply_proposals(mine, props)
        for x, lx in list(new.items()):  # one pointer-jumping step against the previous whole table
            jumped = self.table.get(lx, lx)
            if jumped < lx:
                new[x] = jumped
                changed += 1
        node = np.array(sorted(new), dtype=np.int64)
        label = np.array([new[x] for x in node.tolist()], dtype=np.int64)
        files = self.next_stage.spill(
            _producer(task), np.full(len(node), task.index), {"node": node, "label": label}
        )
        return {ms.CHANGED: changed, ms.FILES: files}

    def route_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        rows = self.labels_stage.gather(task.index, self.inbox)
        node, rep = rows["node"], rows["label"]
        jac = self.jaccards(node, rep)
        files = self.final.spill(
            _producer(task), node >> np.int64(ID_SHIFT), {"id": node, "rep": rep, "jaccard": jac}
        )
        files += self.members.spill(_producer(task), exchange.partition_of(rep, self.parts), {"rep": rep})
        return {ms.REMOVED: len(node), ms.FILES: files}

    def sizes_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        reps = self.members.gather(task.index, self.inbox)["rep"]
        return {**_sizes(reps), ms.FILES: []}

    # -- exact ----------------------------------------------------------------------------------
    def exact_task(self, task: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        rows = self.exact.gather(task.index, self.inbox)
        keys, ids = rows["key"], rows["id"]
        reps = first_ids(keys, ids)
        dup = reps != ids
        cols = {"id": ids[dup], "rep": reps[dup], "jaccard": np.ones(int(dup.sum()))}
        files = self.final.spill(_producer(task), ids[dup] >> np.int64(ID_SHIFT), cols)
        sizes = _sizes(reps[dup])
        _, per_key = np.unique(keys, return_counts=True)
        pairs = int((per_key * (per_key - 1) // 2).sum())
        return {ms.CANDIDATE_PAIRS: pairs, ms.VERIFIED_PAIRS: pairs, **sizes, ms.FILES: files}


def _sizes(reps: np.ndarray) -> Dict[str, Any]:
    """Cluster counts from the representatives of the duplicates (a cluster: its duplicates + 1)."""
    uniq, count = np.unique(reps, return_counts=True)
    size = count + 1
    order = np.lexsort((uniq, -size))[:TOP]
    top: List[Tuple[int, int]] = [(int(uniq[i]), int(size[i])) for i in order.tolist()]
    sizes, per_size = np.unique(size, return_counts=True)
    return {
        ms.CLUSTERS: len(uniq),
        ms.LARGEST_CLUSTER: int(size.max()) if len(size) else 0,
        ms.REMOVED: int(count.sum()),
        ms.LARGEST_CLUSTERS: top,
        ms.CLUSTER_SIZES: {str(s): int(n) for s, n in zip(sizes.tolist(), per_size.tolist())},
    }
