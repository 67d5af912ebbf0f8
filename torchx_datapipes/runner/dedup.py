"""The dedup op: near or exact duplicates removed (``drop``) or marked (``annotate``), for any -j.

Passes (each a pass of the engine: claimed, committed, resumed, exactly once; see docs/dedup.md):

1. ``map`` over the input units: each record with a text ``--field`` gets an internal id
   ``unit index << 32 | line in the unit`` (ordered like the input: files sorted by path, then
   lines). near: its shingles (``_exchange/shingles/u-UUUUU.bin``, for verification) and MinHash
   band keys, exchanged by key (stage ``bands``); exact: its sha256 (stage ``exact``).
2. The duplicate graph over the exchange partitions (``runner/dedup_graph.py``): candidate pairs,
   their exact Jaccard, connected components by min-label propagation, one pass per step, every
   step on every rank; the result is stage ``final``: for each duplicate, its kept record (the
   smallest id of its component) and their Jaccard, partitioned by the duplicate's input unit.
3. ``main`` over the input units: each unit reads its records again and its partition of
   ``final`` and writes ``part-NNNNN.<ext>`` (drop: the kept records unchanged; annotate: every
   record with ``--cluster_field``), and with drop ``_dedup/duplicates-NNNNN.jsonl``.

The stable id written to the output and the duplicates table is ``file index << 40 | line``
(the file's index in the sorted input files, its 1-based line), computed from the map pass's
line counts. Records without a text field are bad records (``--on_error``) in both passes.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import orjson

from torchx_datapipes.dedup import (
    DedupCounts,
    LSHParams,
    MinHasher,
    ShingleBatch,
    band_keys,
    exact_keys,
    optimal_params,
)
from torchx_datapipes.formats.commit import main_meta_names
from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.formats.writing import PartWriter, part_name, writer_class
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import FileSum, write_summed
from torchx_datapipes.io.fs import join
from torchx_datapipes.io.layout import DEDUP_DIR
from torchx_datapipes.ops.dedup import NUM_PERM
from torchx_datapipes.runner import exchange
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.dedup_graph import Graph
from torchx_datapipes.runner.dedup_report import write_report
from torchx_datapipes.runner.engine import RunConfig
from torchx_datapipes.runner.shingle_rows import shingle_rel
from torchx_datapipes.runner.textfield import (
    ID_SHIFT,
    StableIds,
    TextField,
    line_offset,
    prune_side_dir,
    uids,
    write_records,
)

AUTO_PARTITION_BYTES = 16 << 20
EXAMPLES, EXAMPLE_CHARS = 4, 300  # per largest cluster in the report: records shown, characters each


class DedupOp:
    name = "dedup"

    def __init__(
        self,
        cfg: RunConfig,
        field: str,
        method: str,
        threshold: float,
        ngram: int,
        action: str,
        cluster_field: str,
        verify: bool,
        partitions: int,
        fn: Optional[Callable[..., Any]] = None,
    ) -> None:
        if method not in ("near", "exact") or action not in ("drop", "annotate"):
            raise ValueError(f"--method near|exact and --action drop|annotate, got {method!r}, {action!r}")
        self.cfg, self.field, self.method, self.threshold, self.ngram = cfg, field, method, threshold, ngram
        self.action, self.cluster_field, self.verify = action, cluster_field, verify
        self.partitions, self.fn = partitions, fn
        self.params: LSHParams = optimal_params(threshold, NUM_PERM)
        self.hasher = MinHasher(NUM_PERM)
        self.text = TextField(field, annotate=action == "annotate")
        self.graph: Optional[Graph] = None
        self.ids: Optional[StableIds] = None

    def options(self) -> Dict[str, Any]:
        return {
            ms.DEDUP: {
                "field": self.field,
                "method": self.method,
                "threshold": self.threshold,
                "ngram": self.ngram,
                "action": self.action,
                "cluster_field": self.cluster_field,
                "verify": self.verify,
                "partitions": self.partitions,
            }
        }

    def resolved_partitions(self, units: Sequence[Unit]) -> int:
        """``--partitions``, or (0) one per 16 MB of input, at least 4: a function of the input alone."""
        if self.partitions:
            return self.partitions
        return max(4, min(4096, -(-sum(u.nbytes for u in units) // AUTO_PARTITION_BYTES)))

    # -- passes ---------------------------------------------------------------------------
    def run(self, ctx: PassContext) -> None:
        parts = self.resolved_partitions(ctx.units)
        n_units = max(u.index for u in ctx.units) + 1 if ctx.units else 1
        graph = self.graph = Graph(
            ctx.output, parts, n_units, self.method, self.threshold, self.verify
        )  # before the map pass: its workers fork with it
        ctx.run_pass("map", self.map_unit)
        ctx.barrier()
        map_metas = ctx.load_metas("map")
        self.ids = StableIds(ctx.units, map_metas)
        graph.run(ctx, map_metas)
        ctx.run_pass("main", self.write_unit)

    def map_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        quiet = ErrorSink(reader, sink.policy, sink.output)  # raises like main under raise; writes nothing
        lines, maybe = self.text.read(reader, quiet, self.fn)
        texts = [t for t in maybe if t is not None]
        ids = uids(unit.index, np.array([ln for ln, t in zip(lines, maybe) if t is not None], dtype=np.int64))
        assert self.graph is not None
        producer = f"u-{unit.index:05d}"
        files: List[FileSum] = []
        if self.method == "near":
            batch = ShingleBatch.from_texts(texts, self.ngram)
            cols = {"id": ids, "len": batch.lengths.astype(np.int64), "values": batch.values}
            files.append(exchange.write_columns(self.cfg.output, shingle_rel(unit.index), cols))
            keep = batch.lengths > 0
            if keep.any():
                sig = self.hasher.signatures(batch.select(keep), backend="numpy")
                keys = band_keys(sig, self.params).ravel()
                owners = np.repeat(ids[keep], self.params.bands)
                files += self.graph.bands.spill(
                    producer, exchange.partition_of(keys, self.graph.parts), {"key": keys, "id": owners}
                )
        else:
            keys = exact_keys(texts)
            head = np.frombuffer(keys.tobytes(), dtype="<u8")[::4] if len(keys) else np.empty(0, np.uint64)
            files += self.graph.exact.spill(
                producer, exchange.partition_of(head, self.graph.parts), {"key": keys, "id": ids}
            )
        return {ms.TEXTS: len(ids), ms.LINE_OFFSET: line_offset(unit, reader), ms.FILES: files}

    def write_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        assert self.graph is not None and self.ids is not None
        final = self.graph.final_rows(unit.index)
        dup = {int(i): (int(r), float(j)) for i, r, j in zip(final["id"], final["rep"], final["jaccard"])}
        fmt = self.cfg.output_format
        rel = part_name(unit.index, fmt)
        writer = PartWriter(join(self.cfg.output, rel), fmt, key_prefix=unit.name)
        table: List[bytes] = []
        examples: List[List[Any]] = []  # records of the largest clusters, for the report
        shown: Dict[int, int] = {}
        try:
            stream = self.text.stream(reader, sink, self.fn)
            for lines, texts, recs in stream:  # one batch at a time: memory bounded by --batch_size
                out: List[Any] = []
                out_lines: List[int] = []
                for line, text, rec in zip(lines, texts, recs):
                    if text is None:
                        continue
                    uid = (unit.index << ID_SHIFT) | line
                    hit = dup.get(uid)
                    rep = hit[0] if hit else uid
                    if rep in self.graph.top and shown.get(rep, 0) < EXAMPLES:
                        shown[rep] = shown.get(rep, 0) + 1
                        examples.append([rep, uid, hit[1] if hit else 1.0, text[:EXAMPLE_CHARS]])
                    if self.action == "drop":
                        if hit is not None:
                            table.append(self._dup_row(uid, *hit))
                            continue
                        out.append(rec)
                    else:
                        out.append({**rec, self.cluster_field: self.ids.stable(rep)})
                    out_lines.append(line)
                write_records(writer, fmt, out, out_lines, sink)
            writer.commit()
        except BaseException:
            writer.abort()
            raise
        files = list(writer.file_sums(rel))
        if table:
            files.append(
                write_summed(self.cfg.output, f"{DEDUP_DIR}/duplicates-{unit.name}.jsonl", b"".join(table))
            )
        meta: Dict[str, Any] = {
            ms.RECORDS_OUT: writer.records,
            ms.FILTERED: stream.filtered,
            ms.OUTPUTS: [rel],
            ms.DUPLICATES: len(dup),
            ms.EXAMPLES: examples,
            ms.FILES: files,
        }
        meta.update(writer.commit_meta(rel))
        return meta

    def _dup_row(self, uid: int, rep: int, jaccard: float) -> bytes:
        assert self.ids is not None
        (path, line), (kept_path, kept_line) = self.ids.location(uid), self.ids.location(rep)
        row = {
            "id": self.ids.stable(uid),
            "file": path,
            "line": line,
            "kept_id": self.ids.stable(rep),
            "kept_file": kept_path,
            "kept_line": kept_line,
            "jaccard": None if np.isnan(jaccard) else jaccard,
        }
        return orjson.dumps(row) + b"\n"

    # -- commit ---------------------------------------------------------------------------
    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        assert self.graph is not None and self.ids is not None
        texts = sum(int(m[ms.TEXTS]) for m in ctx.load_metas("map"))
        g = self.graph.totals(ctx)
        counts = DedupCounts(
            records_in=texts,
            records_out=texts - g[ms.REMOVED],
            candidate_pairs=g[ms.CANDIDATE_PAIRS],
            verified_pairs=g[ms.VERIFIED_PAIRS],
            clusters=g[ms.CLUSTERS],
            largest_cluster=g[ms.LARGEST_CLUSTER],
        )
        largest = [
            {
                "id": self.ids.stable(rep),
                "file": self.ids.location(rep)[0],
                "line": self.ids.location(rep)[1],
                "size": size,
            }
            for rep, size in g[ms.LARGEST_CLUSTERS]
        ]
        shown: Dict[int, List[Dict[str, Any]]] = {}
        for rep, uid, jac, text in sorted(tuple(e) for m in metas for e in m[ms.EXAMPLES]):
            if len(shown.setdefault(rep, [])) < EXAMPLES:
                path, line = self.ids.location(uid)
                row = {"id": self.ids.stable(uid), "file": path, "line": line, "jaccard": jac, "text": text}
                shown[rep].append(row)
        unified = writer_class(self.cfg.output_format).finalize_job(
            self.cfg.output, metas, main_meta_names(ctx.units)
        )
        removed = sum(int(m[ms.DUPLICATES]) for m in metas) if self.action == "drop" else 0
        prune_side_dir(self.cfg.output, DEDUP_DIR, metas)
        exchange.remove(self.cfg.output)  # last: a crash before _SUCCESS redoes the passes from the input
        section: Dict[str, Any] = {
            **counts.as_manifest(),
            ms.REMOVED: g[ms.REMOVED],
            "method": self.method,
            "threshold": self.threshold,
            "ngram": self.ngram,
            "bands": self.params.bands,
            "rows": self.params.rows,
            "num_perm": NUM_PERM,
            "action": self.action,
            "verify": self.verify,
            "partitions": self.graph.parts,
            "rounds": self.graph.rounds,
            ms.DUPLICATES: join(self.cfg.output, DEDUP_DIR) if removed else None,
            ms.CLUSTER_SIZES: g[ms.CLUSTER_SIZES],
            ms.LARGEST_CLUSTERS: largest,
        }
        examples = [shown.get(rep, []) for rep, _ in g[ms.LARGEST_CLUSTERS]]
        report = write_report(self.cfg.output, section, examples)
        return {
            **unified,
            ms.RECORDS_OUT: sum(int(m[ms.RECORDS_OUT]) for m in metas),
            ms.FILTERED: sum(int(m[ms.FILTERED]) for m in metas),
            ms.OUTPUT: self.cfg.output,
            ms.REPORT: report,
            ms.DEDUP: section,
        }


def make_op(args: Any, cfg: RunConfig, fn: Any) -> DedupOp:
    """The runner of ``ops/dedup.py``."""
    return DedupOp(
        cfg,
        args.field,
        args.method,
        args.threshold,
        args.ngram,
        args.action,
        args.cluster_field,
        bool(args.verify),
        args.partitions,
        fn,
    )
