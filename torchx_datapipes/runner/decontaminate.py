"""The decontaminate op: drop input records sharing a word n-gram with a reference set, for any -j.

Passes (each claimed, committed and resumed by the engine; see docs/dedup.md):

1. ``ref`` over the reference's units (planned from ``--reference`` by every rank alike) and
   ``map`` over the input units: each record's distinct n-grams (``dedup/decontam.py``'s rules),
   as 128-bit keys (``xxh3_128``), exchanged by key: stages ``refgrams`` (key, reference id) and
   ``ingrams`` (key, input id, position of the n-gram in the record's n-grams);
2. ``join`` over the partitions: the smallest reference id of each reference key, looked up for
   every input key; the hits go to the input record's unit (stage ``hits``);
3. ``main`` over the input units: a record with a hit is removed, and ``_dedup/contaminated-NNNNN
   .jsonl`` names the smallest reference id sharing an n-gram, the first such n-gram of the input
   (in text order) and how many distinct n-grams it shares with the reference, as
   ``NgramIndex.match`` does in one process. Ids are ``runner/textfield.py``'s.
"""

import hashlib
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import orjson
import xxhash

from torchx_datapipes.dedup import ngrams, words
from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.commit import main_meta_names
from torchx_datapipes.formats.planning import Unit, plan_units
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.formats.writing import PartWriter, part_name, writer_class
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import write_summed
from torchx_datapipes.io.fs import expand_input_files, join, split_patterns
from torchx_datapipes.io.layout import DEDUP_DIR
from torchx_datapipes.runner import exchange
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.engine import RunConfig
from torchx_datapipes.runner.exchange import Stage
from torchx_datapipes.runner.textfield import (
    ID_SHIFT,
    StableIds,
    TextField,
    line_offset,
    prune_side_dir,
    uids,
    write_records,
)

_KEY, _I8 = "|S16", "<i8"
AUTO_PARTITION_BYTES = 16 << 20


def grams_and_keys(text: str, n: int) -> Tuple[List[str], np.ndarray]:
    """A text's distinct n-grams in text order and their 128-bit keys (``NgramIndex``'s rules)."""
    grams = list(dict.fromkeys(ngrams(words(text), n, short="whole")))
    digest = xxhash.xxh3_128_digest
    return grams, np.array([digest(g.encode()) for g in grams], dtype=_KEY) if grams else np.empty(0, _KEY)


def key_partition(keys: np.ndarray, parts: int) -> np.ndarray:
    head = np.frombuffer(keys.tobytes(), dtype="<u8")[::2] if len(keys) else np.empty(0, np.uint64)
    return exchange.partition_of(head, parts)


def _texts(
    field: TextField, unit: Unit, reader: UnitReader, sink: ErrorSink, fn: Optional[Callable[..., Any]] = None
) -> Tuple[np.ndarray, List[str]]:
    lines, maybe = field.read(reader, ErrorSink(reader, sink.policy, sink.output), fn)  # a private sink
    good = [(ln, t) for ln, t in zip(lines, maybe) if t is not None]
    return uids(unit.index, np.array([ln for ln, _ in good], dtype=np.int64)), [t for _, t in good]


class DecontamOp:
    name = "decontaminate"

    def __init__(
        self,
        cfg: RunConfig,
        reference: str,
        field: str,
        reference_field: str,
        ngram: int,
        partitions: int,
        fn: Optional[Callable[..., Any]] = None,
    ) -> None:
        self.fn = fn
        self.cfg, self.reference, self.ngram, self.partitions = cfg, reference, ngram, partitions
        self.field, self.ref_field = (
            TextField(field, "decontaminate"),
            TextField(reference_field, "decontaminate"),
        )
        try:
            files = expand_input_files(split_patterns(reference))
        except FileNotFoundError as e:
            raise DatapipesError(f"decontaminate --reference: {e}") from e
        self.ref_files = [(f.url, f.size, f.mtime) for f in files]
        listing = orjson.dumps(
            [[u, s] for u, s, _ in self.ref_files]
        )  # what was planned: part of the fingerprint
        self.ref_digest = hashlib.sha256(listing).hexdigest()
        self.ref_units: List[Unit] = []
        self.ref_ids: Optional[StableIds] = None
        self.ids: Optional[StableIds] = None
        self.inbox: Dict[str, exchange.Files] = {}
        self.parts = 0

    def options(self) -> Dict[str, Any]:
        return {
            ms.DECONTAMINATE: {
                "reference": self.reference,
                "reference_files_sha256": self.ref_digest,
                "field": self.field.field,
                "reference_field": self.ref_field.field,
                "ngram": self.ngram,
                "partitions": self.partitions,
            }
        }

    def run(self, ctx: PassContext) -> None:
        c = self.cfg
        self.ref_units = plan_units(self.ref_files, c.format, c.unit_mb, c.max_record_mb)
        nbytes = sum(u.nbytes for u in [*ctx.units, *self.ref_units])
        self.parts = self.partitions or max(4, min(4096, -(-nbytes // AUTO_PARTITION_BYTES)))
        self.refgrams = Stage(c.output, "refgrams", self.parts, (("key", _KEY), ("ref", _I8)))
        self.ingrams = Stage(c.output, "ingrams", self.parts, (("key", _KEY), ("id", _I8), ("pos", _I8)))
        units = max(u.index for u in ctx.units) + 1 if ctx.units else 1
        self.hits = Stage(c.output, "hits", units, (("id", _I8), ("pos", _I8), ("ref", _I8)))
        ctx.run_pass("ref", self.ref_unit, self.ref_units)
        ctx.run_pass("map", self.map_unit)
        ctx.barrier()
        ref_metas, map_metas = ctx.load_metas("ref"), ctx.load_metas("map")
        self.ref_ids, self.ids = StableIds(self.ref_units, ref_metas), StableIds(ctx.units, map_metas)
        self.inbox = {"ref": self.refgrams.files(ref_metas), "in": self.ingrams.files(map_metas)}
        sizes = self.refgrams.sizes(self.inbox["ref"], ref_metas)
        for p, n in self.ingrams.sizes(self.inbox["in"], map_metas).items():
            sizes[p] = sizes.get(p, 0) + n
        ctx.run_pass("join", self.join_task, self.refgrams.tasks(sizes))
        ctx.barrier()
        self.inbox["hits"] = self.hits.files(ctx.load_metas("join"))
        ctx.run_pass("main", self.write_unit)

    # -- passes ---------------------------------------------------------------------------
    def _spill(self, stage: Stage, unit: Unit, ids: np.ndarray, texts: List[str], ref: bool) -> List[Any]:
        keys, owner, pos = [], [], []
        for uid, text in zip(ids.tolist(), texts):
            k = grams_and_keys(text, self.ngram)[1]
            keys.append(k)
            owner.append(np.full(len(k), uid, dtype=np.int64))
            pos.append(np.arange(len(k), dtype=np.int64))
        key = np.concatenate(keys) if keys else np.empty(0, _KEY)
        cols = {"key": key, "ref": np.concatenate(owner) if owner else np.empty(0, np.int64)}
        if not ref:
            cols = {
                "key": key,
                "id": cols["ref"],
                "pos": np.concatenate(pos) if pos else np.empty(0, np.int64),
            }
        return stage.spill(f"u-{unit.index:05d}", key_partition(key, self.parts), cols)

    def ref_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        ids, texts = _texts(self.ref_field, unit, reader, sink)
        files = self._spill(self.refgrams, unit, ids, texts, ref=True)
        return {ms.TEXTS: len(texts), ms.LINE_OFFSET: line_offset(unit, reader), ms.FILES: files}

    def map_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        ids, texts = _texts(self.field, unit, reader, sink, self.fn)
        files = self._spill(self.ingrams, unit, ids, texts, ref=False)
        return {ms.TEXTS: len(texts), ms.LINE_OFFSET: line_offset(unit, reader), ms.FILES: files}

    def join_task(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        ref = self.refgrams.gather(unit.index, self.inbox["ref"])
        order = np.lexsort((ref["ref"], ref["key"]))
        keys, owners = ref["key"][order], ref["ref"][order]
        first = np.r_[True, keys[1:] != keys[:-1]] if len(keys) else np.empty(0, dtype=bool)
        keys, owners = keys[first], owners[first]  # each reference n-gram once, with its smallest id
        inp = self.ingrams.gather(unit.index, self.inbox["in"])
        hit = at = np.empty(0, dtype=np.int64)
        if len(keys) and len(inp["key"]):
            at = np.minimum(np.searchsorted(keys, inp["key"]), len(keys) - 1)
            hit = np.flatnonzero(keys[at] == inp["key"])
        cols = {"id": inp["id"][hit], "pos": inp["pos"][hit], "ref": owners[at[hit]] if len(hit) else hit}
        files = self.hits.spill(f"t-{unit.index:05d}", cols["id"] >> np.int64(ID_SHIFT), cols)
        return {ms.NGRAMS: len(keys), ms.HITS: len(hit), ms.FILES: files}

    def write_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        hits = self.hits.gather(unit.index, self.inbox["hits"])
        match: Dict[int, Tuple[int, int, int]] = {}  # id -> (smallest reference id, first position, shared)
        for i, p, r in sorted(zip(hits["id"].tolist(), hits["pos"].tolist(), hits["ref"].tolist())):
            best = match.get(i)
            if best is None or (r, p) < best[:2]:
                match[i] = (r, p, (best[2] if best else 0) + 1)
            else:
                match[i] = (*best[:2], best[2] + 1)
        fmt = self.cfg.output_format
        rel = part_name(unit.index, fmt)
        writer = PartWriter(join(self.cfg.output, rel), fmt, key_prefix=unit.name)
        table: List[bytes] = []
        try:
            stream = self.field.stream(reader, sink, self.fn)
            for lines, texts, recs in stream:  # one batch at a time: memory bounded by --batch_size
                out, out_lines = [], []
                for line, text, rec in zip(lines, texts, recs):
                    if text is None:
                        continue
                    uid = (unit.index << ID_SHIFT) | line
                    if uid in match:
                        table.append(self._row(uid, text, *match[uid]))
                        continue
                    out.append(rec)
                    out_lines.append(line)
                write_records(writer, fmt, out, out_lines, sink)
            writer.commit()
        except BaseException:
            writer.abort()
            raise
        files = list(writer.file_sums(rel))
        if table:
            files.append(
                write_summed(self.cfg.output, f"{DEDUP_DIR}/contaminated-{unit.name}.jsonl", b"".join(table))
            )
        meta: Dict[str, Any] = {
            ms.RECORDS_OUT: writer.records,
            ms.FILTERED: stream.filtered,
            ms.OUTPUTS: [rel],
            ms.REMOVED: len(table),
            ms.FILES: files,
        }
        meta.update(writer.commit_meta(rel))
        return meta

    def _row(self, uid: int, text: str, ref: int, pos: int, shared: int) -> bytes:
        assert self.ids is not None and self.ref_ids is not None
        (path, line), (ref_path, ref_line) = self.ids.location(uid), self.ref_ids.location(ref)
        row = {
            "id": self.ids.stable(uid),
            "file": path,
            "line": line,
            "reference_id": self.ref_ids.stable(ref),
            "reference_file": ref_path,
            "reference_line": ref_line,
            "ngram": grams_and_keys(text, self.ngram)[0][pos],
            "shared": shared,
        }
        return orjson.dumps(row) + b"\n"

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        texts = sum(int(m[ms.TEXTS]) for m in ctx.load_metas("map"))
        removed = sum(int(m[ms.REMOVED]) for m in metas)
        unified = writer_class(self.cfg.output_format).finalize_job(
            self.cfg.output, metas, main_meta_names(ctx.units)
        )
        section = {
            "records_in": texts,
            "records_out": texts - removed,
            ms.REMOVED: removed,
            "reference_records": sum(int(m[ms.TEXTS]) for m in ctx.load_metas("ref")),
            "reference_ngrams": sum(int(m[ms.NGRAMS]) for m in ctx.load_metas("join")),
            "ngram": self.ngram,
            "partitions": self.parts,
            ms.MATCHES: join(self.cfg.output, DEDUP_DIR) if removed else None,
        }
        prune_side_dir(self.cfg.output, DEDUP_DIR, metas)
        exchange.remove(self.cfg.output)
        return {
            **unified,
            ms.RECORDS_OUT: sum(int(m[ms.RECORDS_OUT]) for m in metas),
            ms.FILTERED: sum(int(m[ms.FILTERED]) for m in metas),
            ms.OUTPUT: self.cfg.output,
            ms.DECONTAMINATE: section,
        }


def make_op(args: Any, cfg: RunConfig, fn: Any) -> DecontamOp:
    """The runner of ``ops/decontaminate.py``."""
    from torchx_datapipes.ops.decontaminate import require_reference

    require_reference(args.reference)
    ref_field = args.reference_field or args.field
    return DecontamOp(cfg, args.reference, args.field, ref_field, args.ngram, args.partitions, fn)
